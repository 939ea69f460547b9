"""Turn a finished command (``CommandResult``) into a step outcome per the kernel tool contract.

plans/0001 §2: one JSON document on stdout with ``ok``; exit 75 with ``blocked: <reason>``
means the step cannot run here (never ``completed``); exit 0 when ok, 1 when a check failed.
A ``python -m <package>.<tool>`` whose module is absent from the bundle is ``blocked`` too
("tool <package>.<tool> is not in the bundle"): a reason outside the step's own code.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel, Field

from orchestrator.gates import evaluate, extract_metrics
from orchestrator.specs import Step
from orchestrator.state import GateOutcome, Status
from orchestrator.transport.base import CommandResult

EXIT_BLOCKED = 75
_NO_MODULE = re.compile(r"No module named '?([A-Za-z0-9_.]+)'?")


class StepOutcome(BaseModel):
    status: Status
    reason: str | None = None
    document: Any = None
    metrics: dict[str, Any] = Field(default_factory=dict)
    gates: list[GateOutcome] = Field(default_factory=list)


def parse_document(stdout: str) -> tuple[Any, str | None]:
    """The one JSON document on stdout, or (None, why not)."""
    text = stdout.strip()
    if not text:
        return None, "printed nothing on stdout (expected one JSON document)"
    try:
        return json.loads(text), None
    except ValueError:
        last = text.splitlines()[-1]
        try:  # tolerate stray lines before a final one-line document
            return json.loads(last), None
        except ValueError:
            return None, "stdout is not one JSON document"


def _module_of(argv: list[str]) -> str | None:
    for i, a in enumerate(argv[:-1]):
        if a == "-m":
            return argv[i + 1]
    return None


def interpret(step: Step, result: CommandResult, values: dict[str, str | None]) -> StepOutcome:
    """Classify one host's run of ``step``: completed only if exit 0, ``ok: true`` and every gate passed.
    The metrics and gates are those of the host's model family (``values["model_family"]``)."""
    step = step.for_family(values.get("model_family"))
    if result.timed_out:
        return StepOutcome(status=Status.failed, reason=f"timed out after {step.timeout_s:g} s")
    if result.lost:
        return StepOutcome(status=Status.failed, reason="connection to the host was lost during the step")
    doc, why = parse_document(result.stdout)
    module = _module_of(result.argv)
    if doc is None and module and result.exit_code == 1:
        m = _NO_MODULE.search(result.stderr)
        if m and (module == m.group(1) or module.startswith(m.group(1) + ".")):
            return StepOutcome(status=Status.blocked, reason=f"tool {module} is not in the bundle ({m.group(0)})")
    if doc is None:
        tail = result.stderr_tail(3).replace("\n", " | ")
        return StepOutcome(
            status=Status.failed, reason=f"exit {result.exit_code}; {why}" + (f"; stderr: {tail}" if tail else "")
        )
    if not isinstance(doc, dict) or not isinstance(doc.get("ok"), bool):
        return StepOutcome(status=Status.failed, document=doc, reason='JSON document has no boolean "ok"')
    metrics = extract_metrics(doc, step.metrics)
    if result.exit_code == EXIT_BLOCKED or doc.get("blocked"):
        reason = (
            doc.get("blocked") if isinstance(doc.get("blocked"), str) else f"exit {result.exit_code}, no reason given"
        )
        return StepOutcome(status=Status.blocked, reason=reason, document=doc, metrics=metrics)
    gates = [evaluate(g, doc, values) for g in step.gates]
    failed = [g for g in gates if not g.passed]
    if result.exit_code != 0 or not doc["ok"]:
        err = doc.get("error") or doc.get("reason")
        reason = f"exit {result.exit_code}, ok={str(doc['ok']).lower()}" + (f": {err}" if isinstance(err, str) else "")
        if failed:
            reason += f"; gate failed: {failed[0].detail}"
        return StepOutcome(status=Status.failed, reason=reason, document=doc, metrics=metrics, gates=gates)
    if failed:
        return StepOutcome(
            status=Status.failed,
            reason=f"gate failed: {failed[0].detail} ({failed[0].reason})",
            document=doc,
            metrics=metrics,
            gates=gates,
        )
    return StepOutcome(status=Status.completed, document=doc, metrics=metrics, gates=gates)
