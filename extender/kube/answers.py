"""API answers read without the generated client's preloading.

``kubernetes_asyncio`` checks an answer's status only when it preloads the body
(``_preload_content=True``); the hot paths ask for the raw response to decode it with msgspec,
so they check the status here: a refusal (403, 404, 409, 422, 5xx) must raise as it would
preloaded, not read as the object asked for.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException


async def checked(call: Awaitable[Any]) -> Any:
    """The raw response of ``call``; ApiException (status, reason, body) when it is not 2xx."""
    response = await call
    if 200 <= response.status <= 299:
        return response
    try:
        body = await response.read()
    finally:
        response.release()
    exc = ApiException(status=response.status, reason=response.reason)
    exc.body = body.decode("utf-8", errors="replace")
    exc.headers = response.headers
    raise exc
