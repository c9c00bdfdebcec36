#!/usr/bin/env python3
"""Generate charts/sparse/values.schema.json and charts/sparse/README.md from values.yaml.

    python3 hack/chart_docs.py            # write both (also: make chart-docs)
    python3 hack/chart_docs.py --check    # exit 1 when either is out of date

values.yaml is the single source. Comments follow the helm-docs convention: a ``# -- text``
block (continued by further ``#`` lines) right above a key documents it. A ``# @schema {json}``
line in that block is merged into the key's JSON schema (enums, minimums, ...). Types come from
the default values. Objects are closed (``additionalProperties: false``, so a misspelt key is an
error at install time) unless they are free-form Kubernetes fields (resources, nodeSelector,
affinity, annotations, labels, security contexts, ...) or empty by default.

Plain Python (PyYAML only), no network: it runs the same in CI, on a laptop and at merge time.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "charts" / "sparse"

# Free-form objects: any keys (Kubernetes API fields or user maps).
OPEN_KEYS = {
    "resources", "nodeSelector", "affinity", "podAnnotations", "podLabels",
    "annotations", "labels", "podSecurityContext", "containerSecurityContext",
    "securityContext", "issuerRef", "requests", "limits",
}
# Keys that may hold more than the chart defines (subcharts read "global").
EXTENSIBLE_KEYS = {"global"}
# Descriptions of the keys every component repeats, when values.yaml says nothing more.
FALLBACK = {
    "resources": "Container resources (requests/limits).",
    "nodeSelector": "Node labels the pods must match.",
    "tolerations": "Tolerations of the pods.",
    "affinity": "Affinity of the pods.",
    "topologySpreadConstraints": "topologySpreadConstraints of the pods; a missing labelSelector "
                                 "is filled with the component's labels.",
    "podAnnotations": "Annotations of this component's pods (added to the global ones).",
    "podLabels": "Labels of this component's pods (added to the global ones).",
    "priorityClassName": "Priority class of the pods (empty: none).",
    "replicas": "Number of pods.",
    "enabled": "Turn this on or off.",
    "minAvailable": "PodDisruptionBudget: pods kept during voluntary disruptions.",
    "pullPolicy": "Image pull policy.",
    "repository": "Image repository.",
    "tag": "Image tag (default: the chart's appVersion).",
    "digest": "Image digest (`sha256:...`); when set it wins over the tag.",
    "metricsPort": "Port of /metrics.",
}
KEY_RE = re.compile(r"^(?P<indent>\s*)(?P<key>[A-Za-z0-9_./-]+|\"[^\"]+\"):(?:\s|$)")


@dataclass
class Doc:
    description: str = ""
    schema: dict[str, Any] = field(default_factory=dict)


def parse_comments(text: str) -> dict[tuple[str, ...], Doc]:
    """Map key paths to their ``# --`` description and ``# @schema`` overrides."""
    docs: dict[tuple[str, ...], Doc] = {}
    stack: list[tuple[int, str]] = []
    pending: Doc | None = None
    in_block = False  # inside a "# --" block (continuation lines belong to it)
    list_indent: int | None = None  # skip the body of block-style list items
    for raw in text.splitlines():
        stripped = raw.strip()
        indent = len(raw) - len(raw.lstrip(" "))
        if not stripped:
            pending, in_block = None, False
            continue
        if stripped.startswith("#"):
            body = stripped[1:].strip()
            if body.startswith("@schema"):
                pending = pending or Doc()
                try:
                    pending.schema.update(json.loads(body[len("@schema"):]))
                except json.JSONDecodeError as exc:
                    raise SystemExit(f"values.yaml: bad @schema JSON {body!r}: {exc}") from exc
            elif body.startswith("-- ") or body == "--":
                pending = pending or Doc()
                pending.description = body[2:].strip()
                in_block = True
            elif in_block and pending is not None and not set(body) <= {"-"}:
                pending.description += " " + body
            else:
                in_block = False
            continue
        if list_indent is not None:
            if indent > list_indent or (indent == list_indent and stripped.startswith("- ")):
                continue
            list_indent = None
        if stripped.startswith("- "):
            list_indent = indent
            pending, in_block = None, False
            continue
        match = KEY_RE.match(raw)
        if not match:
            pending, in_block = None, False
            continue
        key = match.group("key").strip('"')
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, key))
        if pending is not None:
            docs[tuple(k for _, k in stack)] = pending
        pending, in_block = None, False
    return docs


def schema_for(value: Any, path: tuple[str, ...], docs: dict[tuple[str, ...], Doc]) -> dict:
    doc = docs.get(path, Doc())
    out: dict[str, Any] = {}
    if isinstance(value, bool):
        out["type"] = "boolean"
    elif isinstance(value, int):
        out["type"] = "integer"
    elif isinstance(value, float):
        out["type"] = "number"
    elif isinstance(value, str):
        out["type"] = "string"
    elif isinstance(value, list):
        out["type"] = "array"
        kinds = {type(v) for v in value}
        if kinds == {dict}:
            out["items"] = {"type": "object"}
        elif kinds == {str}:
            out["items"] = {"type": "string"}
    elif isinstance(value, dict):
        out["type"] = "object"
        key = path[-1] if path else ""
        if value and key not in OPEN_KEYS:
            if key not in EXTENSIBLE_KEYS:
                out["additionalProperties"] = False
            out["properties"] = {k: schema_for(v, (*path, k), docs) for k, v in value.items()}
    description = doc.description or (FALLBACK.get(path[-1], "") if path else "")
    if description:
        out["description"] = description
    out.update(doc.schema)
    return out


def build_schema(values: dict, docs: dict[tuple[str, ...], Doc]) -> dict:
    root = schema_for(values, (), docs)
    return {"$schema": "http://json-schema.org/draft-07/schema#", "title": "sparse chart values",
            **{k: v for k, v in root.items() if k != "description"}}


def _leaves(value: Any, path: tuple[str, ...]):
    """(path, value) of documented leaves: scalars, lists, and free-form or empty objects."""
    if isinstance(value, dict) and value and (not path or path[-1] not in OPEN_KEYS):
        for k, v in value.items():
            yield from _leaves(v, (*path, k))
    else:
        yield path, value


def _type_name(value: Any) -> str:
    return {bool: "bool", int: "int", float: "float", str: "string", list: "list",
            dict: "object"}.get(type(value), "any")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def build_readme(values: dict, docs: dict[tuple[str, ...], Doc], chart: dict,
                 header: str) -> str:
    lines = [
        f"# {chart['name']}",
        "",
        f"![Version: {chart['version']}](https://img.shields.io/badge/Version-{chart['version']}"
        f"-informational?style=flat-square) ![AppVersion: {chart['appVersion']}]"
        f"(https://img.shields.io/badge/AppVersion-{chart['appVersion']}"
        "-informational?style=flat-square)",
        "",
        " ".join(str(chart.get("description", "")).split()),
        "",
        "<!-- GENERATED by hack/chart_docs.py from values.yaml and README.header.md; "
        "run `make chart-docs`. -->",
        "",
        header.strip(),
        "",
        "## Values",
        "",
        "| Key | Type | Default | Description |",
        "|-----|------|---------|-------------|",
    ]
    for path, value in _leaves(values, ()):
        doc = docs.get(path, Doc())
        if not doc.description and path:
            doc = Doc(FALLBACK.get(path[-1], ""), doc.schema)
        default = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
        if "enum" in doc.schema:
            doc_text = doc.description + (" " if doc.description else "") + "One of: " + ", ".join(
                f"`{v}`" for v in doc.schema["enum"]) + "."
        else:
            doc_text = doc.description
        lines.append(f"| {_cell('.'.join(path))} | {_type_name(value)} | "
                     f"`{_cell(default)}` | {_cell(doc_text)} |")
    return "\n".join(lines) + "\n"


def render(chart_dir: Path = CHART) -> dict[Path, str]:
    text = (chart_dir / "values.yaml").read_text()
    values = yaml.safe_load(text) or {}
    docs = parse_comments(text)
    chart = yaml.safe_load((chart_dir / "Chart.yaml").read_text())
    header_path = chart_dir / "README.header.md"
    header = header_path.read_text() if header_path.exists() else ""
    schema = json.dumps(build_schema(values, docs), indent=2, ensure_ascii=False) + "\n"
    return {chart_dir / "values.schema.json": schema,
            chart_dir / "README.md": build_readme(values, docs, chart, header)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when a file is out of date")
    parser.add_argument("--chart", type=Path, default=CHART)
    args = parser.parse_args(argv)
    stale = []
    for path, content in render(args.chart).items():
        current = path.read_text() if path.exists() else None
        if current == content:
            continue
        if args.check:
            stale.append(path)
        else:
            path.write_text(content)
            print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}",
                  file=sys.stderr)
    if stale:
        names = ", ".join(str(p.relative_to(ROOT)) for p in stale)
        print(f"out of date: {names}; run `make chart-docs`", file=sys.stderr)
        return 1
    if args.check:
        print("chart docs up to date", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
