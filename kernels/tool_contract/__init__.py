"""The host-tool contract every tool of the bundle follows (stdlib only, imports nothing else).

A tool runs on a host as ``python -m <package>.<tool> ... --json`` from the bundle's root and
prints exactly one JSON document on stdout (human text without ``--json``). Its exit code says
what the controller (``orchestrator/outcome.py``) records:

- ``EXIT_OK`` (0): every check passed (``"ok": true``);
- ``EXIT_FAILED`` (1): a check failed (``"ok": false``);
- ``EXIT_USAGE`` (2): the tool was called wrongly;
- ``EXIT_BLOCKED`` (75): nothing could be checked here (no CUDA device, no nvcc, no sglang):
  ``{"ok": false, "blocked": "<reason>"}``. Blocked is never passed, and never a failed check.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_BLOCKED = 0, 1, 2, 75


def blocked_doc(reason: str, **fields: Any) -> dict[str, Any]:
    """The document of a tool that could not check anything here: ``ok`` false, the reason, and
    the tool's own empty fields (so readers find every key they expect)."""
    return {"ok": False, "blocked": reason, **fields}


def exit_code(doc: dict[str, Any]) -> int:
    """75 for a blocked document, 0 when ``ok``, else 1."""
    if doc.get("blocked"):
        return EXIT_BLOCKED
    return EXIT_OK if doc.get("ok") else EXIT_FAILED


def emit(
    doc: dict[str, Any],
    as_json: bool,
    code: int | None = None,
    *,
    human: Callable[[dict[str, Any]], None] | None = None,
    **dumps: Any,
) -> int:
    """Print ``doc`` (one JSON document with ``as_json``; else ``BLOCKED: reason`` and/or
    ``human(doc)``) and return ``code`` (default :func:`exit_code`). ``dumps`` go to ``json.dumps``
    (default ``indent=1``)."""
    if as_json:
        print(json.dumps(doc, **({"indent": 1} | dumps)))
    else:
        if doc.get("blocked"):
            print(f"BLOCKED: {doc['blocked']}")
        if human is not None:
            human(doc)
    return exit_code(doc) if code is None else code
