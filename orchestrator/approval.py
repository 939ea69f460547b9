"""Approval: what is shown before a step that changes a live service, what is accepted, the audit.

One place for ``run`` and ``rollback`` alike: :class:`Approvals` shows the summary (or checks
``--approve``), decides which digests are accepted and which are stale, and audits every
decision. The summary (Terraform style) names the target hosts and each host's action
(``+ run``, ``~ resume from switch``), the bundle sha256, the gate evidence of earlier phases
with numbers (blocked or failed evidence marked as such), what will change and how to undo it,
and its digest. A person
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
from orchestrator.digest import evidence_before
from orchestrator.errors import ApprovalError, OrchestratorError, StateConflict
from orchestrator.invocation import paste_command
from orchestrator.planner import PhasePlan
from orchestrator.specs import LoadedPhase, PhaseCatalog
from orchestrator.state import RunState, current_user, utcnow

APPROVE_WORD = "yes"


class ApprovalSummary(BaseModel):
    action: str  # e.g. "run phase 3-integration" or "roll back phase 3-integration"
    phase: str
    hosts: list[str]
    bundle_sha: str
    actions: list[str] = Field(default_factory=list)  # "h1: ~ resume from switch", one per host
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
    """``0-build-check build @ local: summary.spill_bytes == 0 -> 0 (pass)`` lines, one per gate; a
    step that did not complete is one ``BLOCKED: <reason>`` / ``FAILED: <reason>`` line, no numbers."""
    lines = []
    for phase, rec in evidence.items():
        for host, steps in rec.get("hosts", {}).items():
            for step_id, ev in steps.items():
                if ev.get("status") != "completed":
                    why = ev.get("reason") or "no reason recorded"
                    lines.append(f"{phase} {step_id} @ {host}: {str(ev.get('status')).upper()}: {why}")
                    continue
                for g in ev.get("gates", []):
                    mark = "pass" if g["passed"] else "FAIL"
                    lines.append(f"{phase} {step_id} @ {host}: {g['gate']} -> {json.dumps(g['actual'])} ({mark})")
                if not ev.get("gates"):
                    nums = ", ".join(f"{k}={json.dumps(v)}" for k, v in ev.get("metrics", {}).items())
                    lines.append(f"{phase} {step_id} @ {host}: {ev['status']} {nums}".rstrip())
    return lines


def run_summary(
    lp: LoadedPhase,
    pp: PhasePlan,
    state: RunState,
    catalog: PhaseCatalog,
    digest: str,
    plan_digest: str,
    bundle_sha: str,
    waves: list[list[str]],
) -> ApprovalSummary:
    """The summary shown before the first step of a phase that changes a live service."""
    spec = lp.spec
    ev = evidence_before(state, catalog, spec.order, pp.hosts)
    return ApprovalSummary(
        action=f"run phase {spec.label}",
        phase=spec.label,
        hosts=pp.hosts,
        bundle_sha=bundle_sha,
        actions=[
            f"{a.host}: {a.describe()}" + (f" ({a.detail})" if a.action != "run" and a.detail else "")
            for a in pp.actions
        ],
        evidence=evidence_lines(ev),
        changes=[f"{s.id}: {s.changes or s.title}" for s in spec.steps if s.requires_approval],
        undo=spec.undo or paste_command("rollback", str(spec.id)),
        digest=digest,
        plan_digest=plan_digest,
        waves=waves,
        warnings=[] if ev else [f"no gate evidence recorded for phases before {spec.label}"],
    )


def rollback_summary(selected: list[LoadedPhase], hosts: list[str], bundle_sha: str, digest: str) -> ApprovalSummary:
    """The summary shown before ``orchestrator rollback`` runs any rollback step."""
    label = ",".join(lp.spec.label for lp in selected)
    steps = ", ".join(s.id for lp in reversed(selected) for s in lp.spec.rollback_steps)
    return ApprovalSummary(
        action=f"roll back {label}",
        phase=label,
        hosts=hosts,
        bundle_sha=bundle_sha,
        actions=[f"{h}: - roll back ({steps})" for h in hosts],
        changes=[
            f"{lp.spec.label} {s.id}: {s.changes or s.title}"
            for lp in reversed(selected)
            for s in lp.spec.rollback_steps
        ],
        undo="re-run the phase: " + paste_command("run", *(str(lp.spec.id) for lp in selected)),
        digest=digest,
    )


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
        """Every readable record (a line that is not UTF-8 JSON is skipped); an unreadable file is exit 6."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise StateConflict(
                f"{self.path}: cannot read the audit log ({exc.strerror or exc})", hint="fix its permissions"
            ) from None
        out = []
        for line in data.splitlines():
            try:
                rec = json.loads(line.decode("utf-8"))
            except ValueError:
                continue
            if isinstance(rec, dict):
                out.append(rec)
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
    hint = f"review it with `{paste_command('plan', str(phase))}` and pass --approve <digest>"
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


class Approvals:
    """The approval of one command: the prompt (interactive) or the ``--approve`` check, and the
    audit record of every decision. ``approved`` maps phase id -> the digest approved for it."""

    def __init__(self, audit: AuditLog, approver: Approver, token: str | None, command: str) -> None:
        self.audit = audit
        self.approver = approver
        self.token = token
        self.command = command
        self.approved: dict[int, str] = {}

    def known_digests(self, state: RunState | None = None) -> set[str]:
        """Digests this state dir has seen: in the audit log, and the last run's plan digest."""
        known = self.audit.known_digests()
        if state is not None and state.last_run and state.last_run.plan_digest:
            known.add(state.last_run.plan_digest)
        return known

    def precheck(self, *, accepted: set[str], older: set[str], phase: str, hosts: list[str]) -> None:
        """Without a TTY, check ``--approve`` before anything runs (a refusal changes nothing)."""
        if self.approver.interactive:
            return
        try:
            check_token(self.token, accepted=accepted, older=older, phase=phase)
        except OrchestratorError as exc:
            self._audit("refused", self.token or "", phase, hosts, "flag", exc.message)
            raise

    def obtain(
        self,
        summary: ApprovalSummary,
        *,
        phase_ids: list[int],
        accepted: set[str],
        older: set[str],
        changed_reason: str | None = None,
    ) -> str:
        """Approve ``summary`` (prompt or ``--approve``) or raise (5, or 6 for a stale digest); audited."""
        if self.approver.interactive:
            ok = self.approver.approve(summary)
            self._audit("approved" if ok else "refused", summary.digest, summary.phase, summary.hosts, "prompt")
            if not ok:
                raise ApprovalError(
                    f"{summary.action} not approved (only '{APPROVE_WORD}' approves); nothing changed",
                    phase=summary.phase,
                )
        else:
            try:
                check_token(
                    self.token, accepted=accepted, older=older, phase=summary.phase, changed_reason=changed_reason
                )
            except OrchestratorError as exc:
                self._audit("refused", self.token or "", summary.phase, summary.hosts, "flag", exc.message)
                raise
            self._audit("approved", summary.digest, summary.phase, summary.hosts, "flag", f"--approve {self.token}")
        for pid in phase_ids:
            self.approved[pid] = summary.digest
        return summary.digest

    def audit_step(self, phase_id: int, phase: str, host: str, step: str, decision: str, detail: str) -> None:
        """A transition (``step_started``, ``step_<status>``) of a step that changes a service."""
        self.audit.append(
            decision=decision,
            digest=self.approved.get(phase_id, ""),
            phase=phase,
            hosts=[host],
            via="engine",
            step=step,
            detail=detail,
        )

    def record_planned(self, digest: str, phase: str, hosts: list[str]) -> None:
        """A digest shown by ``plan`` / ``rollback --dry-run``: a later stale ``--approve`` exits 6, not 5."""
        self._audit("planned", digest, phase, hosts, "plan")

    def _audit(self, decision: str, digest: str, phase: str, hosts: list[str], via: str, detail: str = "") -> None:
        self.audit.append(
            decision=decision, digest=digest, phase=phase, hosts=hosts, via=via, command=self.command, detail=detail
        )
