"""The engine: a small facade that selects phases, takes the lock, plans once and hands the plan on.

No UI here (no typer, no rich): the CLI passes an :class:`~orchestrator.approval.Approver`,
an optional ``notify`` callback and progress sink, and renders the returned :class:`RunReport`.

**``run``**: select phases and hosts -> take the state lock (exit 6 if held) -> mark steps of a
dead run ``interrupted`` -> build the plan once (:func:`~orchestrator.planner.build_plan`) ->
refuse spec/inventory problems (exit 3) and phases whose predecessor has not passed (exit 1) ->
without a TTY, check ``--approve`` up front (exit 5/6; a phase up to date everywhere needs none)
-> per phase, in order: skip it when up to date, check that ``kernels/`` still packs to this
command's bundle (else exit 6), approval (:class:`~orchestrator.approval.Approvals`), the same
check again, then :class:`~orchestrator.execution.Execution` runs the planned commands ->
release the lock. **``rollback``**: the same frame around the phases' rollback steps.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, Field

from orchestrator import records
from orchestrator.approval import Approvals, Approver, AuditLog, NonInteractive, rollback_summary, run_summary
from orchestrator.bundle import Bundle
from orchestrator.digest import phase_digest, rollback_digest
from orchestrator.errors import (
    ExitCode,
    Interrupted,
    OrchestratorError,
    SpecError,
    StateConflict,
    StepFailed,
    UsageError,
)
from orchestrator.execution import Event, Execution
from orchestrator.inventory import Host, Inventory
from orchestrator.invocation import paste_command
from orchestrator.paths import project_root
from orchestrator.planner import PhasePlan, Plan, build_plan, waves_for
from orchestrator.progress import NULL_PROGRESS, ProgressSink
from orchestrator.report import RunReport, exit_code, failure_errors
from orchestrator.shipping import BundleShipper
from orchestrator.specs import LoadedPhase, PhaseCatalog, Placement
from orchestrator.state import (
    PhaseRecord,
    RunInfo,
    RunLock,
    RunState,
    StateStore,
    Status,
    command_line,
    current_user,
    utcnow,
)
from orchestrator.transport.factory import TransportFactory, make_transport

__all__ = ["Engine", "Event", "RunOptions", "RunReport"]


class RunOptions(BaseModel):
    forks: int = Field(default=10, ge=1, le=256)
    approve: str | None = None  # --approve DIGEST
    rerun: bool = False  # --yes: re-run phases that already passed without asking
    command: str = ""


def new_run_id(suffix: str = "") -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:6] + suffix


class Engine:
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
        progress: ProgressSink = NULL_PROGRESS,
    ) -> None:
        self.catalog = catalog
        self.inventory = inventory
        self.state_dir = state_dir
        self.store = StateStore(state_dir)
        self.audit = AuditLog(state_dir)
        self.transport_factory = transport_factory
        self.notify: Callable[[Event], None] = notify or (lambda e: None)
        self.progress = progress
        self.shipper = BundleShipper(bundle_root or project_root(), state_dir)

    # ------------------------------------------------------------------ the one bundle of this command
    @property
    def root(self) -> Path:
        """The checkout whose ``kernels/`` is bundled (and where local hosts run)."""
        return self.shipper.root

    @root.setter
    def root(self, value: Path) -> None:
        self.shipper.root = value

    @property
    def bundle_sha(self) -> str:
        return self.shipper.sha

    def shipping_bundle(self) -> Bundle:
        """The bundle file that is shipped (:meth:`~orchestrator.shipping.BundleShipper.bundle`)."""
        return self.shipper.bundle()

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

    def _hosts(self, limit: str | None) -> list[Host]:
        hosts = self.inventory.select(limit)
        if not hosts:
            raise SpecError(f"{self.inventory.path}: --limit selects no host")
        return hosts

    def _build(self, selected: list[LoadedPhase], hosts: list[Host], state: RunState) -> Plan:
        return build_plan(
            self.catalog, selected, self.inventory, hosts, state, self.bundle_sha, self.state_dir, self.root
        )

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
        hosts = self._hosts(limit)
        return self._build(selected, hosts, state if state is not None else self.store.load_for_display())

    def record_planned(self, plan: Plan, command: str) -> None:
        """Remember a shown digest in the audit log so a later stale ``--approve`` exits 6, not 5."""
        Approvals(self.audit, NonInteractive(), None, command).record_planned(
            plan.digest, ",".join(p.label for p in plan.phases), plan.hosts
        )

    # ------------------------------------------------------------------ run
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
        command = opts.command or command_line()
        approvals = Approvals(self.audit, approver or NonInteractive(), opts.approve, opts.command)
        selected = self.select(phase_keys, all_phases)
        hosts = self._hosts(limit)
        with RunLock(self.state_dir, command) as lock:
            state = self.store.load()
            warnings = [f"stale lock info from a dead run taken over: {lock.stale.describe()}"] if lock.stale else []
            who = state.last_run.run_id if state.last_run else "?"
            n = records.mark_interrupted(state, f"interrupted: run {who} ended while this was running")
            if n:
                warnings.append(f"{n} step result(s) left in_progress by a dead run are now 'interrupted'")
                self.store.save(state)
            plan = self._build(selected, hosts, state)
            report = RunReport(plan=plan, warnings=warnings)
            for w in warnings:
                self.notify(Event(kind="warning", message=w))
            try:
                self._refuse(plan)
                asked = [p for p in plan.phases if p.to_approve or (opts.rerun and p.needs_approval)]
                if asked:
                    approvals.precheck(
                        accepted={plan.digest} | {p.digest for p in asked},
                        older=approvals.known_digests(state),
                        phase=asked[0].label,
                        hosts=plan.hosts,
                    )
            except OrchestratorError as exc:
                exc.plan = plan
                raise
            report.run_id = new_run_id()
            state.last_run = RunInfo(
                run_id=report.run_id,
                command=command,
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
            ex = self._execution(state, approvals, report.run_id, opts.forks, plan)
            try:
                for lp in selected:
                    rec = self._run_phase(lp, plan, hosts, state, ex, approvals, opts, report)
                    if rec is None:
                        continue
                    report.phases.append(rec)
                    if rec.status != Status.completed:
                        break
            except KeyboardInterrupt:
                ex.interrupt("interrupted by signal (SIGINT/SIGTERM) while running")
                report.exit_code = int(ExitCode.INTERRUPTED)
                raise Interrupted(
                    "interrupted: in-progress steps recorded as 'interrupted'",
                    hint="run the same command again to resume",
                ) from None
            except StateConflict as exc:  # the bundle changed under the run: stop, record why (exit 6)
                ex.halt(f"stopped: {exc.message}")
                report.exit_code = int(exc.exit_code)
                exc.plan = plan
                raise
            except OrchestratorError as exc:
                exc.plan = plan
                raise
            finally:
                ex.close()
                if ex.touched:
                    if state.last_run is not None:
                        state.last_run.finished_at = utcnow()
                        state.last_run.exit_code = report.exit_code or exit_code(report)
                    ex.save()
            report.warnings += [w for w in ex.warnings if w not in report.warnings]
            report.exit_code = exit_code(report)
            report.errors = failure_errors(report, self.state_dir)
            return report

    def _execution(self, state: RunState, approvals: Approvals, run_id: str, forks: int, plan: Plan) -> Execution:
        return Execution(
            catalog=self.catalog,
            inventory=self.inventory,
            state=state,
            store=self.store,
            shipper=self.shipper,
            approvals=approvals,
            transport_factory=self.transport_factory,
            run_id=run_id,
            forks=forks,
            values=plan.values,
            notify=self.notify,
            progress=self.progress,
        )

    @staticmethod
    def _refuse(plan: Plan) -> None:
        """Spec/inventory problems (exit 3), then phases refused on some host because their
        predecessor has not passed there (exit 1, whatever the TTY; every such host named)."""
        if plan.problems:
            more = f" (+{len(plan.problems) - 1} more)" if len(plan.problems) > 1 else ""
            raise SpecError(
                plan.problems[0] + more,
                hint=f"fix the inventory or the phase spec; `{paste_command('plan')}` lists every problem",
            )
        for pp in plan.phases:
            refused = [a for a in pp.actions if a.action == "refused"]
            if refused:
                others = f" (also refused on {', '.join(a.host for a in refused[1:])})" if len(refused) > 1 else ""
                raise StepFailed(
                    refused[0].detail + others,
                    phase=pp.label,
                    host=refused[0].host,
                    hint=paste_command("run", str(pp.requires)),
                )

    def _run_phase(
        self,
        lp: LoadedPhase,
        plan: Plan,
        hosts: list[Host],
        state: RunState,
        ex: Execution,
        approvals: Approvals,
        opts: RunOptions,
        report: RunReport,
    ) -> PhaseRecord | None:
        spec = lp.spec
        pp = plan.phase(spec.id)
        if all(a.action == "up_to_date" for a in pp.actions) and not opts.rerun:
            q = f"phase {spec.label} already passed on {', '.join(h.name for h in hosts)} with this bundle; run it again?"
            if not (approvals.approver.interactive and approvals.approver.confirm(q)):
                report.skipped_phases.append(spec.label)
                self.notify(
                    Event(
                        kind="message",
                        phase=spec.label,
                        message="up to date (passed with this bundle and spec); --yes re-runs it",
                    )
                )
                return None
        self.shipper.check_source_unchanged(f"before phase {spec.label}")
        if spec.needs_approval:
            self._approve(lp, pp, plan, hosts, state, approvals)
            self.shipper.check_source_unchanged(f"after the approval of phase {spec.label}")
        return ex.run_phase(lp, pp, hosts)

    def _approve(
        self, lp: LoadedPhase, pp: PhasePlan, plan: Plan, hosts: list[Host], state: RunState, approvals: Approvals
    ) -> None:
        """Approve one phase with the evidence recorded now: the digest shown by ``plan`` is accepted
        only while that evidence is unchanged (an older one is stale: exit 6)."""
        digest = phase_digest(lp, self.bundle_sha, hosts, state, self.catalog)
        canary = any(s.runs_on == Placement.canary_then_rest for s in lp.spec.steps)
        waves = [[h.name for h in w] for w in waves_for(hosts, self.inventory, lp.spec.waves)] if canary else []
        summary = run_summary(lp, pp, state, self.catalog, digest, plan.digest, self.bundle_sha, waves)
        unchanged = pp.digest == digest
        older = approvals.known_digests(state) | (set() if unchanged else {plan.digest})
        approvals.obtain(
            summary,
            phase_ids=[lp.spec.id],
            accepted={digest} | ({plan.digest} if unchanged else set()),
            older=older,
            changed_reason=None if unchanged else "gate evidence changed during this run",
        )

    # ------------------------------------------------------------------ rollback
    def rollback_plan(
        self, phase_keys: list[str], *, limit: str | None = None, state: RunState | None = None
    ) -> tuple[list[LoadedPhase], Plan, str]:
        """The phases to roll back, their plan and the rollback digest (nothing is connected or locked)."""
        selected = [lp for lp in self.select(phase_keys, not phase_keys) if lp.spec.rollback_steps]
        if not selected:
            raise SpecError(
                "no selected phase declares rollback_steps",
                hint="phases with rollback: "
                + ", ".join(lp.spec.label for lp in self.catalog.phases if lp.spec.rollback_steps),
            )
        hosts = self._hosts(limit)
        plan = self._build(selected, hosts, state if state is not None else self.store.load_for_display())
        rb_ids = {s.id for lp in selected for s in lp.spec.rollback_steps}
        problems = [p for p in plan.problems if any(f" step {rid} (" in p for rid in rb_ids)]
        if problems:
            raise SpecError(problems[0], hint="the rollback steps cannot be rendered for every host; fix the inventory")
        return selected, plan, rollback_digest(self.bundle_sha, hosts, selected, plan.digest)

    def record_planned_rollback(self, selected: list[LoadedPhase], plan: Plan, digest: str, command: str) -> None:
        """Remember a rollback digest shown by ``rollback --dry-run`` (see :meth:`record_planned`)."""
        Approvals(self.audit, NonInteractive(), None, command).record_planned(
            digest, ",".join(lp.spec.label for lp in selected), plan.hosts
        )

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
        approvals = Approvals(self.audit, approver or NonInteractive(), opts.approve, opts.command)
        hosts = self._hosts(limit)
        with RunLock(self.state_dir, opts.command or command_line()):
            state = self.store.load()
            selected, plan, digest = self.rollback_plan(phase_keys, limit=limit, state=state)
            summary = rollback_summary(selected, [h.name for h in hosts], self.bundle_sha, digest)
            try:
                approvals.obtain(
                    summary,
                    phase_ids=[lp.spec.id for lp in selected],
                    accepted={digest},
                    older=self.audit.known_digests(),
                )
            except OrchestratorError as exc:
                exc.plan = plan
                raise
            self.shipper.check_source_unchanged("after the approval of the rollback")
            report = RunReport(plan=plan, run_id=new_run_id("-rollback"))
            assert report.run_id is not None
            ex = self._execution(state, approvals, report.run_id, opts.forks, plan)
            command = paste_command("rollback", *(str(lp.spec.id) for lp in selected))
            try:
                for lp in sorted(selected, key=lambda x: -x.spec.order):
                    report.phases.append(ex.rollback_phase(lp, plan.phase(lp.spec.id), hosts, command))
            except KeyboardInterrupt:
                ex.interrupt("interrupted by signal during rollback")
                raise Interrupted(
                    "interrupted during rollback: the phase is recorded as failed on the hosts it had started on",
                    hint=f"run `{command}` again",
                ) from None
            finally:
                ex.close()
            report.warnings += ex.warnings
            names = [h.name for h in hosts]
            failed = any(rec.hosts[h].status == Status.failed for rec in report.phases for h in names)
            report.exit_code = int(ExitCode.FAILED if failed else ExitCode.OK)
            report.errors = failure_errors(report, self.state_dir)
            return report
