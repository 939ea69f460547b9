"""Typed gate comparisons over metrics read from a step's JSON document (no eval).

Rules: ``==``/``!=`` compare JSON scalars by type (``true`` never equals ``1``); ordering
operators need numbers on both sides (booleans are not numbers); a missing metric, a NaN or a
type mismatch fails the gate with the reason in ``detail``.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

from orchestrator.placeholders import render
from orchestrator.specs import Gate, GateOp
from orchestrator.state import GateOutcome

MISSING = object()

_ORDER: dict[GateOp, Callable[[Any, Any], bool]] = {
    GateOp.lt: operator.lt,
    GateOp.le: operator.le,
    GateOp.gt: operator.gt,
    GateOp.ge: operator.ge,
}


def lookup(doc: Any, path: str) -> Any:
    """Follow a dotted path (``summary.spill_bytes``; integer parts index lists); MISSING if absent."""
    node = doc
    for part in path.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return MISSING
    return node


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _same_kind(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool)
    if _is_number(a) or _is_number(b):
        return _is_number(a) and _is_number(b)
    return type(a) is type(b)


def evaluate(gate: Gate, doc: Any, values: dict[str, str | None] | None = None) -> GateOutcome:
    """Evaluate one gate against the step's JSON document; placeholders in a string value are filled."""
    expected: Any = gate.value
    if isinstance(expected, str) and values is not None:
        try:
            expected = render(expected, values)
        except KeyError as exc:
            return _fail(gate, expected, MISSING, f"placeholder {{{exc.args[0]}}} has no value on this host")
    actual = lookup(doc, gate.metric)
    if actual is MISSING:
        return _fail(gate, expected, MISSING, f"metric {gate.metric} missing from the step output")
    if gate.op in (GateOp.eq, GateOp.ne):
        equal = _same_kind(actual, expected) and actual == expected
        ok = equal if gate.op == GateOp.eq else not equal
        detail = "" if ok else f"{gate.metric} is {actual!r}, expected {gate.op.value} {expected!r}"
        return GateOutcome(
            metric=gate.metric,
            op=gate.op.value,
            expected=expected,
            actual=actual,
            passed=ok,
            reason=gate.reason,
            detail=detail,
        )
    if not (_is_number(actual) and _is_number(expected)):
        return _fail(gate, expected, actual, f"{gate.metric} is {actual!r}: {gate.op.value} needs numbers")
    if isinstance(actual, float) and math.isnan(actual):
        return _fail(gate, expected, actual, f"{gate.metric} is NaN")
    ok = _ORDER[gate.op](actual, expected)
    detail = "" if ok else f"{gate.metric} = {actual!r}, needs {gate.op.value} {expected!r}"
    return GateOutcome(
        metric=gate.metric,
        op=gate.op.value,
        expected=expected,
        actual=actual,
        passed=ok,
        reason=gate.reason,
        detail=detail,
    )


def _fail(gate: Gate, expected: Any, actual: Any, detail: str) -> GateOutcome:
    return GateOutcome(
        metric=gate.metric,
        op=gate.op.value,
        expected=expected,
        actual=None if actual is MISSING else actual,
        passed=False,
        reason=gate.reason,
        detail=detail,
    )


def extract_metrics(doc: Any, paths: list[str]) -> dict[str, Any]:
    """The values at ``paths`` (absent ones left out); containers are kept only if small."""
    out: dict[str, Any] = {}
    for p in paths:
        v = lookup(doc, p)
        if v is MISSING:
            continue
        if isinstance(v, (dict, list)) and len(str(v)) > 2000:
            v = f"<{type(v).__name__} of {len(v)} items>"
        out[p] = v
    return out
