"""Approval: what is shown before a step that changes a live service, and what is accepted.

The summary (Terraform style) names the target hosts, the bundle sha256, the gate evidence of
earlier phases with numbers, what will change and how to undo it, and its digest. A person
approves by typing exactly ``yes``; without a TTY (or with ``--json``) only ``--approve DIGEST``
equal to the digest of exactly that summary (or of the whole plan it belongs to, as printed by
``orchestrator plan``) approves. ``--yes`` never approves such a step. Every decision is
appended to ``<state_dir>/audit.jsonl`` (one JSON object per line, fsynced), and so is every
transition (start, end with its status) of a step that changes a service: the steps of a phase
that needs approval, and every rollback step.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, Field

from orchestrator.atomic import append_line
from orchestrator.errors import ApprovalError, StateConflict
from orchestrator.state import current_user, utcnow

APPROVE_WORD = "yes"


class ApprovalSummary(BaseModel):
    action: str  # e.g. "run phase 3-integration" or "roll back phase 3-integration"
    phase: str
    hosts: list[str]
    bundle_sha: str
    evidence: list[str] = Field(default_factory=list)
    changes: list[str] = Field(default_factory=list)
    waves: list[list[str]] = Field(default_factory=list)  # rollout order of canary_then_rest steps
    undo: str = ""
    digest: str
    plan_digest: str | None = None
    warnings: list[str] = Field(default_factory=list)


class Approver(Protocol):
    """The UI side: ``approve`` shows the summary and returns True only for the exact word;
    ``confirm`` asks a non-critical yes/no question."""

    interactive: bool

    def approve(self, summary: ApprovalSummary) -> bool: ...

    def confirm(self, question: str) -> bool: ...


class NonInteractive:
    """No TTY / ``--json``: never prompts; approval only through ``--approve DIGEST``."""

    interactive = False

    def approve(self, summary: ApprovalSummary) -> bool:  # pragma: no cover - never called
        return False

    def confirm(self, question: str) -> bool:
        return False


def evidence_lines(evidence: dict[str, Any]) -> list[str]:
    """``0-build-check build @ local: summary.spill_bytes == 0 -> 0 (pass)`` lines, one per gate."""
    lines = []
    for phase, rec in evidence.items():
        for host, steps in rec.get("hosts", {}).items():
            for step_id, ev in steps.items():
                for g in ev.get("gates", []):
                    mark = "pass" if g["passed"] else "FAIL"
                    lines.append(f"{phase} {step_id} @ {host}: {g['gate']} -> {json.dumps(g['actual'])} ({mark})")
                if not ev.get("gates"):
                    nums = ", ".join(f"{k}={json.dumps(v)}" for k, v in ev.get("metrics", {}).items())
                    lines.append(f"{phase} {step_id} @ {host}: {ev['status']} {nums}".rstrip())
    return lines


class AuditLog:
    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / "audit.jsonl"

    def append(
        self,
        *,
        decision: str,
        digest: str,
        phase: str,
        hosts: list[str],
        via: str,
        command: str = "",
        detail: str = "",
        step: str | None = None,
    ) -> None:
        """One record. ``decision``: planned | approved | refused for approvals; ``step_started`` /
        ``step_<status>`` for the transitions of service-changing steps (``step`` names it)."""
        rec = {
            "time": utcnow(),
            "user": current_user(),
            "host": socket.gethostname(),
            "decision": decision,
            "digest": digest,
            "phase": phase,
            "hosts": hosts,
            "via": via,
            "command": command,
            "detail": detail,
        }
        if step is not None:
            rec["step"] = step
        append_line(self.path, json.dumps(rec, sort_keys=True))

    def records(self) -> list[dict[str, Any]]:
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return []
        out = []
        for line in lines:
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out

    def known_digests(self) -> set[str]:
        return {r.get("digest", "") for r in self.records()}


def check_token(
    token: str | None, *, accepted: Iterable[str], older: Iterable[str], phase: str, changed_reason: str | None = None
) -> None:
    """Raise unless ``token`` is one of ``accepted`` digests.

    No token -> ApprovalError (5). A token that belonged to an older plan (``older``: digests seen
    before, e.g. in the audit log, or this run's start plan when evidence changed since) ->
    StateConflict (6). Anything else -> ApprovalError (5).
    """
    acc = set(accepted)
    hint = f"review it with `orchestrator plan {phase}` and pass --approve <digest>"
    if not token:
        raise ApprovalError(
            f"phase {phase} changes a live service and needs approval (no TTY: --approve DIGEST)",
            hint=hint,
            phase=phase,
        )
    t = token.strip().lower()
    if t in acc:
        return
    if t in set(older):
        why = changed_reason or "it belongs to an older plan"
        raise StateConflict(f"--approve {t[:12]}... is stale for phase {phase}: {why}", hint=hint, phase=phase)
    raise ApprovalError(
        f"--approve {t[:12]}... does not match the plan digest of phase {phase}", hint=hint, phase=phase
    )
