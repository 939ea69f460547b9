"""Gates are typed comparisons over the step's JSON document; a missing metric fails."""

from __future__ import annotations

import math

import pytest

from orchestrator.gates import MISSING, evaluate, extract_metrics, lookup
from orchestrator.specs import Gate

DOC = {
    "ok": True,
    "summary": {
        "spill_bytes": 0,
        "speedup": 21.5,
        "deterministic": True,
        "arch": "sm_120a",
        "nan": math.nan,
        "per_case": [{"err": 0.5}],
    },
}


def gate(metric: str, op: str, value, reason: str = "why") -> Gate:
    return Gate(metric=metric, op=op, value=value, reason=reason)


@pytest.mark.parametrize(
    "op,value,passed",
    [
        ("==", 0, True),
        ("!=", 0, False),
        ("<", 1, True),
        ("<=", 0, True),
        (">", 0, False),
        (">=", 0, True),
        ("==", 1, False),
        (">=", -1, True),
        ("<", 0, False),
    ],
)
def test_every_operator_on_a_number(op, value, passed):
    assert evaluate(gate("summary.spill_bytes", op, value), DOC).passed is passed


@pytest.mark.parametrize(
    "metric,op,value,passed",
    [
        ("summary.speedup", ">=", 20, True),
        ("summary.speedup", ">=", 22, False),
        ("summary.speedup", "<=", 21.5, True),
        ("summary.deterministic", "==", True, True),
        ("summary.deterministic", "==", False, False),
        ("summary.arch", "==", "sm_120a", True),
        ("summary.arch", "!=", "sm_90a", True),
        ("summary.per_case.0.err", "<", 1, True),
    ],
)
def test_floats_bools_strings_and_list_indexes(metric, op, value, passed):
    assert evaluate(gate(metric, op, value), DOC).passed is passed


def test_missing_metric_fails_with_the_reason():
    out = evaluate(gate("summary.cases_failed", "==", 0), DOC)
    assert out.passed is False
    assert "missing" in out.detail and "summary.cases_failed" in out.detail
    assert out.actual is None


def test_missing_metric_fails_even_for_not_equal():
    assert evaluate(gate("summary.absent", "!=", 1), DOC).passed is False


def test_bool_is_never_a_number():
    assert evaluate(gate("summary.deterministic", "==", 1), DOC).passed is False
    out = evaluate(gate("summary.deterministic", ">=", 1), DOC)
    assert out.passed is False and "needs numbers" in out.detail


def test_string_against_number_ordering_fails():
    assert evaluate(gate("summary.arch", ">", 3), DOC).passed is False


def test_nan_fails_ordering_gates():
    out = evaluate(gate("summary.nan", "<=", 1e9), DOC)
    assert out.passed is False and "NaN" in out.detail


def test_placeholder_in_gate_value_is_filled_per_host():
    g = gate("summary.arch", "==", "{arch}")
    assert evaluate(g, DOC, {"arch": "sm_120a"}).passed is True
    assert evaluate(g, DOC, {"arch": "sm_90a"}).passed is False
    assert evaluate(g, DOC, {"arch": None}).passed is False


def test_reason_is_carried_into_the_outcome():
    assert (
        evaluate(gate("summary.spill_bytes", "==", 0, "spills cost bandwidth"), DOC).reason == "spills cost bandwidth"
    )


def test_lookup_and_extract():
    assert lookup(DOC, "summary.per_case.1") is MISSING
    assert lookup(DOC, "ok") is True
    assert extract_metrics(DOC, ["summary.spill_bytes", "summary.absent"]) == {"summary.spill_bytes": 0}


@pytest.mark.parametrize("bad", ["summary..x", "1abc", "a b", "a.{x}"])
def test_gate_metric_must_be_a_dotted_path(bad):
    with pytest.raises(ValueError):
        gate(bad, "==", 0)


def test_unknown_operator_is_rejected():
    with pytest.raises(ValueError):
        gate("summary.x", "=~", 0)
