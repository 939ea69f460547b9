"""The engine: plan, run and roll back phases on hosts, with gates, state, approval and audit.

No UI here (no typer, no rich): the CLI passes an :class:`~orchestrator.approval.Approver`
and an optional ``notify`` callback, and renders the returned :class:`RunReport`.

**Lifecycle of ``run``**: plan (no connection) -> refuse spec/inventory problems (exit 3) ->
take the state lock (exit 6 if held) -> mark steps of a dead run ``interrupted`` -> check
``--approve`` up front when not interactive -> per phase, in order: predecessor check, ``kernels/``
still packs to this command's bundle (else StateConflict, exit 6), approval (before any step of a
phase that has approval steps, so a refusal changes nothing) and the same check again, steps
(persisting after every transition; the bundle is shipped/hash-checked on the host before each,
see :meth:`StepRunner._bundle_dir`), rollback on hosts where a step failed -> release the lock.

**One bundle per command**: ``kernels/`` is packed once (:meth:`Engine._pack`); its sha256 is
used for the digest, the approval summary, state and the hosts, and the same bytes are written
to ``<state_dir>/bundles/<sha>.tar.gz`` the first time a host needs them
(:meth:`Engine.shipping_bundle`).

**Placement**: ``local`` steps run once on this machine (recorded under host ``@local``; a
failure fails the phase on every host); ``each_host`` steps run on all active hosts in parallel
(at most ``forks`` at a time); consecutive ``canary_then_rest`` steps form one block that runs
wave by wave (canary alone first), every host running the whole block; any failure in a wave
stops the later waves. **Failure policy**: ``fail_fast`` stops starting the step on more hosts
after the first failure and ends the phase; ``continue`` drops failed hosts and goes on while at
most ``max_failed_hosts`` failed (None: no limit). **Rollback**: when a step fails on a host,
the rollback steps named by that step and by the steps that completed before it on that host
run there, in the order ``rollback_steps`` lists them.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from orchestrator.approval import ApprovalSummary, Approver, AuditLog, NonInteractive, check_token, evidence_lines
from orchestrator.errors import (
    ApprovalError,
    ExitCode,
    Interrupted,
    OrchestratorError,
    SpecError,
    StateConflict,
    StepFailed,
    UsageError,
)
from orchestrator.execution import BAD, Event, StepRunner, aggregate_status, ensure_bundle_on_host
from orchestrator.inventory import Host, Inventory
from orchestrator.paths import project_root
from orchestrator.planner import CONTROLLER, Plan, build_plan, compute_digest, evidence_before, phase_digest, waves_for
from orchestrator.specs import LoadedPhase, PhaseCatalog, Placement
from orchestrator.state import (
    HostPhase,
    PhaseRecord,
    RunInfo,
    RunLock,
    RunState,
    StateStore,
    Status,
    StepRecord,
    command_line,
    current_user,
    utcnow,
)
from orchestrator.transport.base import Transport
from orchestrator.transport.factory import TransportFactory, make_transport
from orchestrator.transport.local import terminate_all

__all__ = ["Engine", "Event", "RunOptions", "RunReport", "ensure_bundle_on_host"]


class RunOptions(BaseModel):
    forks: int = Field(default=10, ge=1, le=256)
    approve: str | None = None  # --approve DIGEST
    rerun: bool = False  # --yes: re-run phases that already passed without asking
    command: str = ""


class RunReport(BaseModel):
    """What a run did: the plan it ran, the phase records it wrote and the exit code."""

    run_id: str | None = None
    plan: Plan
    phases: list[PhaseRecord] = Field(default_factory=list)
    skipped_phases: list[str] = Field(default_factory=list)
    exit_code: int = 0
    errors: list[dict[str, Any]] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)


class Engine(StepRunner):
    """Runs phases of one catalog on hosts of one inventory, recording state in ``state_dir``."""

    def __init__(
        self,
        *,
        catalog: PhaseCatalog,
        inventory: Inventory,
        state_dir: Path,
        transport_factory: TransportFactory = make_transport,
        notify: Callable[[Event], None] | None = None,
        bundle_root: Path | None = None,
    ) -> None:
        self.catalog = catalog
        self.inventory = inventory
        self.state_dir = state_dir
        self.store = StateStore(state_dir)
        self.audit = AuditLog(state_dir)
        self.transport_factory = transport_factory
        self.notify = notify or (lambda e: None)
        self.root = bundle_root or project_root()
        self._packed: tuple[str, bytes, int] | None = None  # (sha256, tar.gz bytes, files): packed once
        self._mu = threading.RLock()
        self._stop = threading.Event()
        self._transports: dict[str, Transport] = {}
        self._bundle_dirs: dict[tuple[str, int], str] = {}
        self._bundle_obj: Any = None  # the Bundle written from self._packed (first time it is needed)
        self._run_warnings: list[str] = []
        self._touched = False
        self._approved: dict[int, str] = {}

    # ------------------------------------------------------------------ the one bundle of this command
    def _pack(self) -> tuple[str, bytes, int]:
        """Pack ``kernels/`` once per command: these bytes are what the plan digest, the approval
        summary and every host get (plans/0001 section 9, "one bundle per command")."""
        with self._mu:
            if self._packed is None:
                import hashlib

                from orchestrator.bundle import pack_bytes

                data, files = pack_bytes(self.root)
                self._packed = (hashlib.sha256(data).hexdigest(), data, files)
            return self._packed

    @property
    def bundle_sha(self) -> str:
        """sha256 of this command's bundle (computed once; planning writes nothing)."""
        return self._pack()[0]

    def shipping_bundle(self) -> Any:
        """The :class:`~orchestrator.bundle.Bundle` that is shipped: the packed bytes of this
        command, written once (atomically) to ``<state_dir>/bundles/<sha>.tar.gz``. The file is
        re-hashed before every shipment; a different hash raises StateConflict (exit 6)."""
        from orchestrator.bundle import file_sha256, write_bundle

        sha, data, files = self._pack()
        with self._mu:
            if self._bundle_obj is None:
                self._bundle_obj = write_bundle(data, files, self.state_dir / "bundles")
            b = self._bundle_obj
        try:
            got = file_sha256(b.path)
        except OSError as exc:
            got = f"unreadable ({exc.strerror})"
        if b.sha256 != sha or got != sha:
            raise StateConflict(
                f"bundle changed during this run: the planned and approved bundle is {sha} but "
                f"{b.path} now hashes to {got if b.sha256 == sha else b.sha256}; nothing more is shipped",
                hint="run the command again: it packs kernels/ anew and shows a new plan and digest",
            )
        return b

    def check_source_unchanged(self, when: str) -> None:
        """Re-pack ``kernels/`` and compare with this command's bundle; StateConflict (exit 6,
        naming both hashes) when it changed: local hosts run in the checkout, and a run must not
        go on with code other than the bundle it planned and had approved."""
        from orchestrator.bundle import bundle_sha

        sha = self.bundle_sha
        now = bundle_sha(self.root)
        if now != sha:
            raise StateConflict(
                f"kernels/ under {self.root} changed during this run ({when}): the planned and approved "
                f"bundle is {sha} but kernels/ now packs to {now}; nothing more is run",
                hint="run the command again: it packs kernels/ anew and shows a new plan and digest",
            )

    # ------------------------------------------------------------------ planning

    def select(self, phase_keys: list[str], all_phases: bool) -> list[LoadedPhase]:
        if all_phases:
            return list(self.catalog.phases)
        if not phase_keys:
            raise UsageError("no phase given", hint="name phases (e.g. `orchestrator run 0`) or pass --all")
        out: list[LoadedPhase] = []
        for k in phase_keys:
            lp = self.catalog.resolve(k)
            if lp not in out:
                out.append(lp)
        return sorted(out, key=lambda lp: lp.spec.order)

    def plan(
        self,
        phase_keys: list[str],
        *,
        all_phases: bool = False,
        limit: str | None = None,
        state: RunState | None = None,
    ) -> Plan:
        """The plan (commands per host, actions, digest) without connecting or locking anything."""
        selected = self.select(phase_keys, all_phases)
        hosts = self.inventory.select(limit)
        if not hosts:
            raise SpecError(f"{self.inventory.path}: --limit selects no host")
        st = state if state is not None else self.store.load_for_display()
        return build_plan(self.catalog, selected, self.inventory, hosts, st, self.bundle_sha, self.state_dir)

    def record_planned(self, plan: Plan, command: str) -> None:
        """Remember a shown digest in the audit log so a later stale ``--approve`` exits 6, not 5."""
        self.audit.append(
            decision="planned",
            digest=plan.digest,
            phase=",".join(p.label for p in plan.phases),
            hosts=plan.hosts,
            via="plan",
            command=command,
        )

    # ------------------------------------------------------------------ running
    def run(
        self,
        phase_keys: list[str],
        *,
        all_phases: bool = False,
        limit: str | None = None,
        options: RunOptions | None = None,
        approver: Approver | None = None,
    ) -> RunReport:
        opts = options or RunOptions()
        approver = approver or NonInteractive()
        plan = self.plan(phase_keys, all_phases=all_phases, limit=limit)
        if plan.problems:
            raise SpecError(
                plan.problems[0] + (f" (+{len(plan.problems) - 1} more)" if len(plan.problems) > 1 else ""),
                hint="fix the inventory or the phase spec; `orchestrator plan` lists every problem",
            )
        selected = self.select(phase_keys, all_phases)
        hosts = self.inventory.select(limit)
        with RunLock(self.state_dir, opts.command or command_line()) as lock:
            report = RunReport(plan=plan)
            if lock.stale is not None:
                report.warnings.append(f"stale lock info from a dead run taken over: {lock.stale.describe()}")
            state = self.store.load()
            n = state.mark_interrupted(
                f"interrupted: run {state.last_run.run_id if state.last_run else '?'} ended while this was running"
            )
            if n:
                report.warnings.append(f"{n} step result(s) left in_progress by a dead run are now 'interrupted'")
                self.store.save(state)
            plan = build_plan(self.catalog, selected, self.inventory, hosts, state, self.bundle_sha, self.state_dir)
            report.plan = plan
            for w in report.warnings:
                self.notify(Event(kind="warning", message=w))
            start_digests = {p.id: p.digest for p in plan.phases}
            if not approver.interactive and plan.needs_approval:
                first = next(p for p in plan.phases if p.needs_approval)
                accepted = {plan.digest} | {p.digest for p in plan.phases if p.needs_approval}
                try:
                    check_token(
                        opts.approve,
                        accepted=accepted,
                        older=self.audit.known_digests() | self._recorded_digests(state),
                        phase=first.label,
                    )
                except OrchestratorError as exc:
                    self.audit.append(
                        decision="refused",
                        digest=(opts.approve or ""),
                        phase=first.label,
                        hosts=plan.hosts,
                        via="flag",
                        command=opts.command,
                        detail=exc.message,
                    )
                    raise
            run_id = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:6]
            report.run_id = run_id
            state.last_run = RunInfo(
                run_id=run_id,
                command=opts.command or command_line(),
                pid=os.getpid(),
                hostname=socket.gethostname(),
                user=current_user(),
                started_at=utcnow(),
                phases=[lp.spec.id for lp in selected],
                hosts=plan.hosts,
                plan_digest=plan.digest,
            )
            state.inventory = str(self.inventory.path)
            state.bundle_sha = self.bundle_sha
            self._touched = False  # nothing is written until a phase really starts (refusal changes nothing)
            try:
                for lp in selected:
                    rec = self._run_phase(lp, hosts, state, run_id, opts, approver, plan, start_digests, report)
                    if rec is None:
                        continue
                    report.phases.append(rec)
                    if rec.status != Status.completed:
                        break
            except KeyboardInterrupt:
                self._interrupt(state)
                report.exit_code = int(ExitCode.INTERRUPTED)
                raise Interrupted(
                    "interrupted: in-progress steps recorded as 'interrupted'",
                    hint="run the same command again to resume",
                ) from None
            except StateConflict as exc:  # the bundle changed under the run: stop, record why (exit 6)
                self._stop.set()
                with self._mu:
                    state.mark_interrupted(f"stopped: {exc.message}")
                report.exit_code = int(exc.exit_code)
                raise
            finally:
                self._close_transports()
                if self._touched:
                    if state.last_run is not None:
                        state.last_run.finished_at = utcnow()
                        state.last_run.exit_code = report.exit_code if report.exit_code else self._exit_for(report)
                    with self._mu:
                        self.store.save(state)
            report.warnings += [w for w in self._run_warnings if w not in report.warnings]
            report.exit_code = self._exit_for(report)
            return report

    @staticmethod
    def _recorded_digests(state: RunState) -> set[str]:
        """Plan digests this state dir has seen (the last run's), besides those in the audit log."""
        return {state.last_run.plan_digest} if state.last_run and state.last_run.plan_digest else set()

    def _exit_for(self, report: RunReport) -> int:
        bad = [(p, h) for p in report.phases for h in p.hosts.values() if h.status in BAD]
        if not bad:
            return int(ExitCode.OK)
        if all("unreachable: " in (h.reason or "") for _, h in bad):
            return int(ExitCode.UNREACHABLE)
        return int(ExitCode.FAILED)

    def _interrupt(self, state: RunState) -> None:
        self._stop.set()
        terminate_all()
        self._close_transports()
        with self._mu:
            if state.mark_interrupted("interrupted by signal (SIGINT/SIGTERM) while running") or self._touched:
                self.store.save(state)

    # ------------------------------------------------------------------ one phase
    def _run_phase(
        self,
        lp: LoadedPhase,
        hosts: list[Host],
        state: RunState,
        run_id: str,
        opts: RunOptions,
        approver: Approver,
        plan: Plan,
        start_digests: dict[int, str],
        report: RunReport,
    ) -> PhaseRecord | None:
        spec = lp.spec
        pplan = build_plan(self.catalog, [lp], self.inventory, hosts, state, self.bundle_sha, self.state_dir).phases[0]
        refused = [a for a in pplan.actions if a.action == "refused"]
        if refused:
            raise StepFailed(
                refused[0].detail, phase=spec.label, host=refused[0].host, hint=f"orchestrator run {spec.requires}"
            )
        if all(a.action == "up_to_date" for a in pplan.actions) and not opts.rerun:
            q = f"phase {spec.label} already passed on {', '.join(h.name for h in hosts)} with this bundle; run it again?"
            if not (approver.interactive and approver.confirm(q)):
                report.skipped_phases.append(spec.label)
                self.notify(
                    Event(
                        kind="message",
                        phase=spec.label,
                        message="up to date (passed with this bundle and spec); --yes re-runs it",
                    )
                )
                return None
        self.check_source_unchanged(f"before phase {spec.label}")
        if spec.needs_approval:
            self._approve(lp, hosts, state, opts, approver, plan, start_digests)
            self.check_source_unchanged(f"after the approval of phase {spec.label}")
        self.notify(Event(kind="phase_started", phase=spec.label, message=f"{spec.title} ({len(hosts)} hosts)"))
        resume = {a.host for a in pplan.actions if a.action == "resume"}
        with self._mu:
            rec = self._prepare_record(lp, hosts, state, run_id, resume)
            self._touched = True
            self.store.save(state)
        active = [h for h in hosts]
        failed: dict[str, str] = {}
        i = 0
        steps = spec.steps
        while i < len(steps) and not self._stop.is_set():
            step = steps[i]
            if step.runs_on == Placement.canary_then_rest:
                j = i
                while j < len(steps) and steps[j].runs_on == Placement.canary_then_rest:
                    j += 1
                block = steps[i:j]
                i = j
                active = self._run_waves(lp, block, active, rec, state, run_id, opts, failed)
            else:
                i += 1
                active = self._run_step(lp, step, active, rec, state, run_id, opts, failed)
            if not active or self._halted(spec, failed, hosts):
                break
        with self._mu:
            self._finish_record(lp, rec, hosts, failed)
            self.store.save(state)
        return rec

    def _halted(self, spec: Any, failed: dict[str, str], hosts: list[Host]) -> bool:
        if not failed:
            return False
        if spec.failure_policy.mode == "fail_fast":
            return True
        limit = spec.failure_policy.max_failed_hosts
        return limit is not None and len(failed) > limit

    def _approve(
        self,
        lp: LoadedPhase,
        hosts: list[Host],
        state: RunState,
        opts: RunOptions,
        approver: Approver,
        plan: Plan,
        start_digests: dict[int, str],
    ) -> None:
        spec = lp.spec
        digest = phase_digest(lp, self.bundle_sha, hosts, state, self.catalog)
        names = [h.name for h in hosts]
        ev = evidence_before(state, self.catalog, spec.order, names)
        summary = ApprovalSummary(
            action=f"run phase {spec.label}",
            phase=spec.label,
            hosts=names,
            bundle_sha=self.bundle_sha,
            evidence=evidence_lines(ev),
            changes=[f"{s.id}: {s.changes or s.title}" for s in spec.steps if s.requires_approval],
            undo=spec.undo or f"orchestrator rollback {spec.id}",
            digest=digest,
            plan_digest=plan.digest,
            waves=[[h.name for h in w] for w in waves_for(hosts, self.inventory, spec.waves)]
            if any(s.runs_on == Placement.canary_then_rest for s in spec.steps)
            else [],
            warnings=[] if ev else [f"no gate evidence recorded for phases before {spec.label}"],
        )
        if approver.interactive:
            ok = approver.approve(summary)
            self.audit.append(
                decision="approved" if ok else "refused",
                digest=digest,
                phase=spec.label,
                hosts=names,
                via="prompt",
                command=opts.command,
            )
            if not ok:
                raise ApprovalError(
                    f"phase {spec.label} not approved (only 'yes' approves); nothing changed", phase=spec.label
                )
            self._approved[spec.id] = digest
            return
        unchanged = start_digests.get(spec.id) == digest
        accepted = {digest} | ({plan.digest} if unchanged else set())
        older = self.audit.known_digests() | self._recorded_digests(state)
        if not unchanged:
            older.add(plan.digest)
        try:
            check_token(
                opts.approve,
                accepted=accepted,
                older=older,
                phase=spec.label,
                changed_reason=None if unchanged else "gate evidence changed during this run",
            )
        except OrchestratorError as exc:
            self.audit.append(
                decision="refused",
                digest=opts.approve or "",
                phase=spec.label,
                hosts=names,
                via="flag",
                command=opts.command,
                detail=exc.message,
            )
            raise
        self.audit.append(
            decision="approved",
            digest=digest,
            phase=spec.label,
            hosts=names,
            via="flag",
            command=opts.command,
            detail=f"--approve {opts.approve}",
        )
        self._approved[spec.id] = digest

    def _prepare_record(
        self, lp: LoadedPhase, hosts: list[Host], state: RunState, run_id: str, resume: set[str]
    ) -> PhaseRecord:
        spec = lp.spec
        old = state.phase(spec.id)
        fresh = old is None or old.bundle_sha != self.bundle_sha or old.spec_sha != lp.sha256
        rec = PhaseRecord(id=spec.id, name=spec.name, title=spec.title) if fresh else old
        assert rec is not None
        rec.status, rec.reason, rec.run_id = Status.in_progress, None, run_id
        rec.started_at, rec.finished_at = utcnow(), None
        rec.bundle_sha, rec.spec_sha = self.bundle_sha, lp.sha256
        by_id = {s.id: s for s in rec.steps}
        rec.steps = []
        for step in list(spec.steps) + list(spec.rollback_steps):
            sr = by_id.get(step.id) or StepRecord(id=step.id, content=step.title)
            sr.content, sr.priority, sr.rollback = step.title, step.priority.value, step in spec.rollback_steps
            for h in hosts:
                keep = (
                    h.name in resume
                    and sr.hosts.get(h.name)
                    and sr.hosts[h.name].status == Status.completed
                    and not sr.rollback
                )
                if not keep:
                    sr.hosts.pop(h.name, None)
            if step.runs_on == Placement.local and not any(h in resume for h in (x.name for x in hosts)):
                sr.hosts.pop(CONTROLLER, None)
            sr.status = aggregate_status(sr) if sr.hosts else Status.pending
            sr.reason = None if sr.status == Status.pending else sr.reason
            rec.steps.append(sr)
        for h in hosts:
            rec.hosts[h.name] = HostPhase(status=Status.in_progress, bundle_sha=self.bundle_sha, spec_sha=lp.sha256)
        state.phases[str(spec.id)] = rec
        return rec

    def _finish_record(self, lp: LoadedPhase, rec: PhaseRecord, hosts: list[Host], failed: dict[str, str]) -> None:
        main = [s for s in rec.steps if not s.rollback]
        for h in hosts:
            hp = rec.hosts[h.name]
            hp.finished_at = utcnow()
            results = []
            for s in main:
                local = lp.spec.step(s.id).runs_on == Placement.local
                results.append((s, s.hosts.get(CONTROLLER if local else h.name)))
            bad = [(s, r) for s, r in results if r is not None and r.status in BAD]
            if h.name in failed:
                why = failed[h.name]
                hp.status = (
                    Status.blocked
                    if why.startswith("blocked")
                    else Status.skipped
                    if why.startswith("skipped")
                    else Status.failed
                )
                hp.reason = why
            elif bad:
                s, r = bad[0]
                hp.status, hp.reason = r.status, f"step {s.id}: {r.reason}"
            elif all(r is not None and r.status == Status.completed for _, r in results):
                hp.status, hp.reason = Status.completed, None
            else:
                hp.status = Status.skipped
                hp.reason = hp.reason or "not run: the phase stopped on another host (failure policy)"
        for s in rec.steps:
            if s.status == Status.pending and not s.rollback and any(hp.status in BAD for hp in rec.hosts.values()):
                s.status, s.reason = Status.skipped, "not run: an earlier step failed or was blocked"
        sts = [rec.hosts[h.name].status for h in hosts]
        if all(s == Status.completed for s in sts):
            rec.status, rec.reason = Status.completed, None
        else:
            worst = next(
                (s for s in (Status.failed, Status.interrupted, Status.blocked, Status.skipped) if s in sts),
                Status.failed,
            )
            rec.status = worst
            first = next(h for h in hosts if rec.hosts[h.name].status == worst)
            rec.reason = f"{first.name}: {rec.hosts[first.name].reason}"
        rec.finished_at = utcnow()
        self.notify(
            Event(kind="phase_finished", phase=lp.spec.label, status=rec.status.value, message=rec.reason or "")
        )

    # ------------------------------------------------------------------ rollback command
    def rollback_plan(self, phase_keys: list[str], *, limit: str | None = None) -> tuple[list[LoadedPhase], Plan, str]:
        selected = [lp for lp in (self.select(phase_keys, not phase_keys)) if lp.spec.rollback_steps]
        if not selected:
            raise SpecError(
                "no selected phase declares rollback_steps",
                hint="phases with rollback: "
                + ", ".join(lp.spec.label for lp in self.catalog.phases if lp.spec.rollback_steps),
            )
        plan = self.plan([lp.spec.label for lp in selected], limit=limit)
        rb_ids = {s.id for lp in selected for s in lp.spec.rollback_steps}
        problems = [p for p in plan.problems if any(f" step {rid} (" in p for rid in rb_ids)]
        if problems:
            raise SpecError(problems[0], hint="the rollback steps cannot be rendered for every host; fix the inventory")
        hosts = self.inventory.select(limit)
        digest = compute_digest(self.bundle_sha, hosts, selected, {"rollback": True, "plan": plan.digest})
        return selected, plan, digest

    def rollback(
        self,
        phase_keys: list[str],
        *,
        limit: str | None = None,
        options: RunOptions | None = None,
        approver: Approver | None = None,
    ) -> RunReport:
        """Run each selected phase's rollback steps on the selected hosts (latest phase first), after approval."""
        opts = options or RunOptions()
        approver = approver or NonInteractive()
        selected, plan, digest = self.rollback_plan(phase_keys, limit=limit)
        hosts = self.inventory.select(limit)
        names = [h.name for h in hosts]
        label = ",".join(lp.spec.label for lp in selected)
        with RunLock(self.state_dir, opts.command or command_line()):
            state = self.store.load()
            summary = ApprovalSummary(
                action=f"roll back {label}",
                phase=label,
                hosts=names,
                bundle_sha=self.bundle_sha,
                changes=[
                    f"{lp.spec.label} {s.id}: {s.changes or s.title}"
                    for lp in reversed(selected)
                    for s in lp.spec.rollback_steps
                ],
                undo="re-run the phase: orchestrator run " + " ".join(str(lp.spec.id) for lp in selected),
                digest=digest,
            )
            if approver.interactive:
                ok = approver.approve(summary)
                self.audit.append(
                    decision="approved" if ok else "refused",
                    digest=digest,
                    phase=label,
                    hosts=names,
                    via="prompt",
                    command=opts.command,
                )
                if not ok:
                    raise ApprovalError(f"rollback of {label} not approved; nothing changed", phase=label)
            else:
                try:
                    check_token(opts.approve, accepted={digest}, older=self.audit.known_digests(), phase=label)
                except OrchestratorError as exc:
                    self.audit.append(
                        decision="refused",
                        digest=opts.approve or "",
                        phase=label,
                        hosts=names,
                        via="flag",
                        command=opts.command,
                        detail=exc.message,
                    )
                    raise
                self.audit.append(
                    decision="approved", digest=digest, phase=label, hosts=names, via="flag", command=opts.command
                )
            for lp in selected:
                self._approved[lp.spec.id] = digest
            self.check_source_unchanged("after the approval of the rollback")
            run_id = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:6] + "-rollback"
            report = RunReport(plan=plan, run_id=run_id)
            try:
                for lp in sorted(selected, key=lambda x: -x.spec.order):
                    rec = state.phase(lp.spec.id) or PhaseRecord(id=lp.spec.id, name=lp.spec.name, title=lp.spec.title)
                    state.phases[str(lp.spec.id)] = rec
                    for rstep in lp.spec.rollback_steps:
                        sr = rec.step(rstep.id)
                        if sr is None:
                            sr = StepRecord(
                                id=rstep.id, content=rstep.title, priority=rstep.priority.value, rollback=True
                            )
                            rec.steps.append(sr)
                        results = self._pool_map(
                            lambda h, s=rstep, r=sr: self._execute(lp, s, h, r, state, run_id), hosts, opts.forks
                        )
                        for h in hosts:
                            res = results[h.name]
                            hp = rec.hosts.setdefault(h.name, HostPhase())
                            if res.status == Status.completed:
                                hp.status, hp.reason = Status.pending, f"rolled back ({rstep.id}) at {utcnow()}"
                            else:
                                hp.status, hp.reason = Status.failed, f"rollback {rstep.id}: {res.reason}"
                    sts = [rec.hosts[h].status for h in names]
                    rec.status = Status.failed if Status.failed in sts else Status.pending
                    rec.reason = "rolled back" if rec.status == Status.pending else "rollback failed"
                    self.store.save(state)
                    report.phases.append(rec)
            except KeyboardInterrupt:
                self._interrupt(state)
                raise Interrupted("interrupted during rollback; state records it") from None
            finally:
                self._close_transports()
            failed = any(rec.hosts[h].status == Status.failed for rec in report.phases for h in names)
            report.exit_code = int(ExitCode.FAILED if failed else ExitCode.OK)
            return report
