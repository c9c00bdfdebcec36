"""AdmissionReview v1 in, AdmissionReview v1 out. Pure and total: never raises.

* well-formed review of a Pod CREATE → ``allowed: true`` with a base64 JSONPatch (or none);
* other operations / kinds           → ``allowed: true``, no patch (the webhook never blocks
  what it does not understand; the chart only routes pod CREATEs here anyway);
* a Pod the patch code rejects        → ``allowed: false``, ``status.code`` 400 and the reason;
* bytes that are not an AdmissionReview v1 → HTTP 400 with an AdmissionReview whose
  ``response.status.message`` says what is wrong (the API server then applies failurePolicy).
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Mapping
from typing import Any

from webhook.patch import InvalidPod, PatchConfig, compute_patch

API_VERSION = "admission.k8s.io/v1"
MAX_BODY_BYTES = 8 * 1024 * 1024  # above the API server's 3 MiB object limit, with margin
MAX_UID_LEN = 128

log = logging.getLogger("sparse.webhook")


def _review(response: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response}


def _denied(uid: str, code: int, message: str) -> dict[str, Any]:
    return _review({"uid": uid, "allowed": False,
                    "status": {"code": code, "message": message, "reason": "BadRequest"}})


def handle(body: bytes, config: PatchConfig) -> tuple[int, dict[str, Any]]:
    """(HTTP status, AdmissionReview) for the raw request body."""
    try:
        return _handle(body, config)
    except Exception as exc:  # noqa: BLE001 - last line of defence: answer, never crash
        log.exception("webhook: unexpected error")
        return 500, _denied("", 500, f"internal error: {type(exc).__name__}")


def _handle(body: bytes, config: PatchConfig) -> tuple[int, dict[str, Any]]:
    if len(body) > MAX_BODY_BYTES:
        return 400, _denied("", 400, f"request body over {MAX_BODY_BYTES} bytes")
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError) as exc:
        return 400, _denied("", 400, f"body is not JSON: {str(exc)[:200]}")
    if not isinstance(doc, Mapping):
        return 400, _denied("", 400, "body is not a JSON object")
    if doc.get("kind") != "AdmissionReview" or doc.get("apiVersion") != API_VERSION:
        return 400, _denied("", 400, f"expected kind AdmissionReview, apiVersion {API_VERSION}")
    request = doc.get("request")
    if not isinstance(request, Mapping):
        return 400, _denied("", 400, "AdmissionReview has no request")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid or len(uid) > MAX_UID_LEN:
        return 400, _denied("", 400, "request.uid must be a non-empty string")

    kind = request.get("kind")
    is_pod = (isinstance(kind, Mapping) and kind.get("kind") == "Pod"
              and kind.get("group", "") == "" and not request.get("subResource"))
    if request.get("operation") != "CREATE" or not is_pod:
        return 200, _review({"uid": uid, "allowed": True})
    try:
        ops = compute_patch(request.get("object"), config)
    except InvalidPod as exc:
        return 200, _denied(uid, 400, f"sparse webhook: {exc}")
    response: dict[str, Any] = {"uid": uid, "allowed": True}
    if ops:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(
            json.dumps(ops, separators=(",", ":")).encode()).decode()
        meta = request.get("object", {}).get("metadata") or {}
        log.info("mutated pod %s/%s: %d op(s)", request.get("namespace", ""),
                 meta.get("name") or meta.get("generateName", ""), len(ops))
    return 200, _review(response)
