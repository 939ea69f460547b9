"""Per-host step execution: transports, the bundle hook, the thread pool, waves, rollback on a host.

:class:`StepRunner` is the half of :class:`orchestrator.engine.Engine` that touches hosts. Every
transition of a host's step result is recorded under ``self._mu`` and persisted at once
(``store.save``), so a run killed at any point leaves state that tells the truth.
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from orchestrator import facts
from orchestrator.approval import AuditLog
from orchestrator.errors import HostUnreachable, OrchestratorError, StateConflict
from orchestrator.inventory import Host, Inventory
from orchestrator.outcome import interpret
from orchestrator.paths import bundle_source
from orchestrator.planner import CONTROLLER, display_command, host_values, render_step, ship_action, waves_for
from orchestrator.specs import LoadedPhase, Placement, Step
from orchestrator.state import (
    BundleEvidence,
    HostPhase,
    HostStepResult,
    PhaseRecord,
    RunState,
    StateStore,
    Status,
    StepRecord,
    utcnow,
)
from orchestrator.transport.base import Transport
from orchestrator.transport.factory import TransportFactory
from orchestrator.transport.local import LocalTransport, terminate_all

log = logging.getLogger(__name__)

#: Outcomes that stop a host in a phase.
BAD = (Status.failed, Status.blocked, Status.interrupted)


class Event(BaseModel):
    """A progress event for the UI (the engine never prints)."""

    kind: str  # phase_started | step_started | step_finished | rollback | message | warning
    phase: str | None = None
    step: str | None = None
    host: str | None = None
    status: str | None = None
    message: str = ""
    log_path: str | None = None


def ensure_bundle_on_host(transport: Transport, bundle: Any, host: Host) -> str:
    """Ship and verify ``bundle`` on ``host`` (``orchestrator.bundle.ship_bundle``); the remote dir.

    Kept for callers outside the engine; the engine itself uses :meth:`StepRunner._bundle_dir`,
    which also re-checks the bundle on the host before every step and records what it did."""
    from orchestrator import bundle as bundle_mod

    return bundle_mod.ship_bundle(transport, bundle, host).remote_dir


def aggregate_status(sr: StepRecord) -> Status:
    """A step's status from its per-host results: any in_progress/interrupted/failed/blocked wins."""
    sts = [r.status for r in sr.hosts.values()]
    for s in (Status.in_progress, Status.interrupted, Status.failed, Status.blocked):
        if s in sts:
            return s
    if sts and all(s == Status.completed for s in sts):
        return Status.completed
    if sts and all(s in (Status.completed, Status.skipped) for s in sts):
        return Status.skipped if Status.completed not in sts else Status.completed
    return Status.pending


class StepRunner:
    """Runs steps on hosts for the engine (attributes are set by ``Engine.__init__``)."""

    inventory: Inventory
    state_dir: Path
    store: StateStore
    transport_factory: TransportFactory
    notify: Callable[[Event], None]
    root: Path
    bundle_sha: str
    _mu: threading.RLock
    _stop: threading.Event
    _transports: dict[str, Transport]
    _bundle_dirs: dict[tuple[str, int], str]  # (host, phase id) -> remote bundle dir shipped in this command
    _run_warnings: list[str]
    shipping_bundle: Callable[[], Any]  # Engine.shipping_bundle: the one Bundle of this command
    _approved: dict[int, str]  # phase id -> the digest approved in this run
    audit: AuditLog

    def _close_transports(self) -> None:
        for t in list(self._transports.values()):
            try:
                t.close()
            except Exception:  # noqa: BLE001 - closing is best effort
                pass
        self._transports.clear()

    def _pool_map(self, fn: Callable[[Host], Any], hosts: list[Host], forks: int) -> dict[str, Any]:
        """Run ``fn`` per host on a thread pool; the main thread waits in short slices so that a
        KeyboardInterrupt (SIGINT, or SIGTERM turned into one by the CLI) is handled at once."""
        out: dict[str, Any] = {}
        if not hosts:
            return out
        ex = cf.ThreadPoolExecutor(max_workers=min(forks, len(hosts)), thread_name_prefix="orchestrator-host")
        try:
            futs = {ex.submit(fn, h): h.name for h in hosts}
            pending = set(futs)
            while pending:
                done, pending = cf.wait(pending, timeout=0.2)
                for f in done:
                    out[futs[f]] = f.result()
        except BaseException:
            self._stop.set()
            terminate_all()
            ex.shutdown(wait=False, cancel_futures=True)
            raise
        ex.shutdown(wait=True)
        return out

    def _run_step(
        self,
        lp: LoadedPhase,
        step: Step,
        active: list[Host],
        rec: PhaseRecord,
        state: RunState,
        run_id: str,
        opts: RunOptions,
        failed: dict[str, str],
    ) -> list[Host]:
        sr = rec.step(step.id)
        assert sr is not None
        if step.runs_on == Placement.local:
            prev = sr.hosts.get(CONTROLLER)
            if prev is None or prev.status != Status.completed:
                r = self._execute(lp, step, None, sr, state, run_id)
                if r.status != Status.completed:
                    for h in active:
                        failed[h.name] = f"{r.status.value}: step {step.id} on this machine: {r.reason}"
                    return []
            return active
        policy = lp.spec.failure_policy
        first_failure = threading.Event()

        def one(host: Host) -> HostStepResult:
            prev = sr.hosts.get(host.name)
            if prev is not None and prev.status == Status.completed:
                return prev
            if self._stop.is_set() or (policy.mode == "fail_fast" and first_failure.is_set()):
                return self._skip(sr, host.name, state, "not started: another host failed (fail_fast)")
            r = self._execute(lp, step, host, sr, state, run_id)
            if r.status in BAD:
                first_failure.set()
            return r

        results = self._pool_map(one, active, opts.forks)
        still = []
        for h in active:
            r = results[h.name]
            if r.status in BAD:
                failed[h.name] = f"{r.status.value}: step {step.id}: {r.reason}"
                self._rollback_host(lp, step, h, rec, state, run_id)
            elif r.status == Status.completed:
                still.append(h)
        return still

    def _run_waves(
        self,
        lp: LoadedPhase,
        block: list[Step],
        active: list[Host],
        rec: PhaseRecord,
        state: RunState,
        run_id: str,
        opts: RunOptions,
        failed: dict[str, str],
    ) -> list[Host]:
        waves = waves_for(active, self.inventory, lp.spec.waves)
        done: list[Host] = []
        for wi, wave in enumerate(waves):
            if self._stop.is_set():
                break

            def chain(host: Host) -> HostStepResult | None:
                for step in block:
                    sr = rec.step(step.id)
                    assert sr is not None
                    prev = sr.hosts.get(host.name)
                    if prev is not None and prev.status == Status.completed:
                        continue
                    r = self._execute(lp, step, host, sr, state, run_id)
                    if r.status in BAD:
                        failed[host.name] = f"{r.status.value}: step {step.id} (wave {wi + 1}): {r.reason}"
                        self._rollback_host(lp, step, host, rec, state, run_id)
                        return r
                return None

            results = self._pool_map(chain, wave, opts.forks)
            bad = [h for h in wave if results[h.name] is not None]
            done += [h for h in wave if results[h.name] is None]
            if bad:
                rest = [h for w in waves[wi + 1 :] for h in w]
                for h in rest:
                    for step in block:
                        sr = rec.step(step.id)
                        assert sr is not None
                        self._skip(sr, h.name, state, f"not started: wave {wi + 1} failed on {bad[0].name}")
                    failed.setdefault(h.name, f"skipped: wave {wi + 1} failed on {bad[0].name}")
                return []
        return done

    def _skip(self, sr: StepRecord, host: str, state: RunState, reason: str) -> HostStepResult:
        with self._mu:
            r = HostStepResult(status=Status.skipped, reason=reason, finished_at=utcnow())
            sr.hosts[host] = r
            sr.status = aggregate_status(sr)
            self.store.save(state)
        return r

    def _transport(self, host: Host | None) -> Transport:
        key = host.name if host else CONTROLLER
        with self._mu:
            t = self._transports.get(key)
        if t is None:
            if host is None:
                t = LocalTransport(CONTROLLER)
            else:
                t = self.transport_factory(host)
            with self._mu:
                self._transports[key] = t
        return t

    def _bundle_dir(self, host: Host | None, transport: Transport, lp: LoadedPhase, step: Step, state: RunState) -> str:
        """The step cwd / ``{bundle_dir}``, with the bundle hash-checked on the host before this use.

        The controller and local hosts run in the checkout. An ssh host (and, in a phase that
        changes a service, a local host too: the cut-over verbs point ``current`` at
        ``<remote_root>/bundles/<sha>``; its commands still run in the checkout) gets:

        - before its first step of each phase: ``ship_bundle`` (one host-side check; upload only
          when the host has no tarball with this sha256; re-unpack a missing or damaged tree,
          recorded as ``repaired`` with a warning; ends with a check that must say ``ok``);
        - before every later step of that phase: ``verify_on_host`` (one round trip); anything but
          ``ok`` fails the host with a BundleError naming the verdict. A rollback step instead
          repairs the tree (recorded) so that it can still run from the approved bytes.

        What happened is recorded in the phase record as ``hosts[<host>].bundle``.
        """
        if host is None or (host.is_local and not lp.spec.needs_approval):
            return str(bundle_source(self.root))
        from orchestrator import bundle as bundle_mod

        key = (host.name, lp.spec.id)
        with self._mu:
            known = self._bundle_dirs.get(key)
        is_rollback = step in lp.spec.rollback_steps
        if known is None:
            shipped = self._ship(bundle_mod, transport, host, lp, state, fresh=True)
            with self._mu:
                self._bundle_dirs[key] = shipped
            return str(bundle_source(self.root)) if host.is_local else shipped
        bundle = self.shipping_bundle()
        try:
            verdict = bundle_mod.verify_on_host(transport, bundle, host)
        except OrchestratorError as exc:
            self._record_check(lp, host, state, f"error: {exc.message}", ok=False)
            raise
        self._record_check(lp, host, state, verdict, ok=verdict == "ok")
        if verdict != "ok":
            if is_rollback:
                self._ship(bundle_mod, transport, host, lp, state, fresh=False)
            else:
                raise bundle_mod.BundleError(
                    f"{host.name}: bundle {bundle.short} failed its hash check on the host before step {step.id} "
                    f"of phase {lp.spec.label} ({verdict}): {known} no longer matches the manifest written when "
                    "it was unpacked (a file was edited, removed or replaced on the host); not repaired mid-phase: "
                    f"`orchestrator run {lp.spec.id}` re-checks it and re-unpacks it from the verified tarball",
                    host=host.name,
                    phase=lp.spec.label,
                )
        return str(bundle_source(self.root)) if host.is_local else known

    def _host_phase(self, lp: LoadedPhase, host: Host, state: RunState) -> HostPhase | None:
        rec = state.phase(lp.spec.id)
        if rec is None:
            return None
        return rec.hosts.setdefault(host.name, HostPhase())

    def _ship(
        self, bundle_mod: Any, transport: Transport, host: Host, lp: LoadedPhase, state: RunState, *, fresh: bool
    ) -> str:
        """``ship_bundle`` on ``host`` and record it (``fresh``: the first use in this phase)."""
        bundle = self.shipping_bundle()
        remote_dir = ship_action(host, bundle.sha256).remote_dir
        with self._mu:
            hp = self._host_phase(lp, host, state)
            ev = (
                hp.bundle
                if hp is not None and hp.bundle is not None and not fresh
                else BundleEvidence(sha256=bundle.sha256, remote_dir=remote_dir)
            )
            if hp is not None:
                hp.bundle = ev
        try:
            shipped = bundle_mod.ship_bundle(transport, bundle, host)
        except OrchestratorError as exc:
            with self._mu:
                ev.verified, ev.last_check, ev.checked_at = False, f"error: {exc.message}", utcnow()
                ev.checks += 1
            raise
        repaired = shipped.found not in ("ok", "absent")
        with self._mu:
            ev.remote_dir = shipped.remote_dir
            ev.uploaded = ev.uploaded or shipped.uploaded
            ev.unpacked = ev.unpacked or shipped.unpacked
            ev.repaired = ev.repaired or repaired
            ev.found = shipped.found if fresh or not ev.found else ev.found
            ev.verified, ev.last_check, ev.checked_at = (
                shipped.verified,
                "ok" if shipped.verified else "failed",
                utcnow(),
            )
            ev.checks += 1
            ev.ship_duration_s = shipped.duration_s
        if repaired:
            msg = (
                f"{host.name}: bundle {bundle.short} failed its hash check on the host before phase "
                f"{lp.spec.label} ({shipped.found}); "
                + ("re-uploaded and " if shipped.uploaded else "")
                + f"re-unpacked from the verified tarball (the damaged tree is kept as {bundle.sha256}.damaged.<pid>)"
            )
            with self._mu:
                self._run_warnings.append(msg)
            self.notify(Event(kind="warning", phase=lp.spec.label, host=host.name, message=msg))
        return shipped.remote_dir

    def _record_check(self, lp: LoadedPhase, host: Host, state: RunState, verdict: str, *, ok: bool) -> None:
        with self._mu:
            hp = self._host_phase(lp, host, state)
            if hp is None or hp.bundle is None:
                return
            hp.bundle.checks += 1
            hp.bundle.verified, hp.bundle.last_check, hp.bundle.checked_at = ok, verdict, utcnow()

    def _audit_transition(self, lp: LoadedPhase, step: Step, host: str, decision: str, detail: str) -> None:
        """Append a step transition to the audit log when the step changes a service (a step of a
        phase that needs approval, or any rollback step); ``digest`` is the approved one."""
        if not (lp.spec.needs_approval or step in lp.spec.rollback_steps):
            return
        self.audit.append(
            decision=decision,
            digest=self._approved.get(lp.spec.id, ""),
            phase=lp.spec.label,
            hosts=[host],
            via="engine",
            step=step.id,
            detail=detail,
        )

    def _execute(
        self, lp: LoadedPhase, step: Step, host: Host | None, sr: StepRecord, state: RunState, run_id: str
    ) -> HostStepResult:
        """Run one step on one host (None = this machine), record every transition, return the result."""
        name = host.name if host else CONTROLLER
        log_dir = self.state_dir / "runs" / run_id / (name if host else "_controller")
        log_path = log_dir / f"{lp.spec.label}-{step.id}.log"
        values = host_values(host, self.bundle_sha, self.state_dir)
        r = HostStepResult(status=Status.in_progress, started_at=utcnow(), log_path=str(log_path))
        with self._mu:
            sr.hosts[name] = r
            sr.status = Status.in_progress
            sr.started_at = sr.started_at or r.started_at
            self.store.save(state)
        self.notify(Event(kind="step_started", phase=lp.spec.label, step=step.id, host=name))
        self._audit_transition(lp, step, name, "step_started", "")
        try:
            transport = self._transport(host)
            values["bundle_dir"] = self._bundle_dir(host, transport, lp, step, state)
            cwd = values["bundle_dir"] or str(bundle_source(self.root))
            if step.builtin == "facts":
                r.command = f"<builtin:facts> ({values['python']})"
                result = facts.collect(
                    transport,
                    values["python"] or "python3",
                    cwd=cwd,
                    timeout_s=step.timeout_s,
                    log_path=log_path,
                    service_python=values.get("service_python"),
                )
            else:
                argv = render_step(step, host, values, inventory_path=self.inventory.path, phase_label=lp.spec.label)
                r.command = display_command(host, argv, cwd, step.timeout_s)
                if host is not None and not host.is_local:
                    log_path.parent.mkdir(parents=True, exist_ok=True)
                result = transport.run(argv, timeout_s=step.timeout_s, cwd=cwd, log_path=log_path)
            outcome = interpret(step, result, values)
            r.exit_code, r.duration_s = result.exit_code, round(result.duration_s, 3)
            r.status, r.reason, r.metrics, r.gates = outcome.status, outcome.reason, outcome.metrics, outcome.gates
        except HostUnreachable as exc:
            r.status, r.reason = Status.failed, f"unreachable: {exc.message}"
        except StateConflict as exc:  # the bundle changed under this run: record it, then stop the run (exit 6)
            r.status, r.reason, r.finished_at = Status.failed, exc.message, utcnow()
            self._stop.set()
            with self._mu:
                sr.hosts[name] = r
                sr.status = aggregate_status(sr)
                sr.reason = r.reason
                self.store.save(state)
            raise
        except OrchestratorError as exc:  # spec problems, bundle errors (BundleError) ...
            r.status, r.reason = Status.failed, exc.message
        except Exception as exc:  # noqa: BLE001 - a transport bug must not leave the step in_progress
            log.exception("step %s on %s raised", step.id, name)
            r.status, r.reason = Status.failed, f"internal error while running the step: {type(exc).__name__}: {exc}"
        r.finished_at = utcnow()
        if self._stop.is_set() and r.status != Status.completed:
            r.status, r.reason = Status.interrupted, "interrupted by signal while running"
        with self._mu:
            sr.hosts[name] = r
            sr.status = aggregate_status(sr)
            sr.reason = r.reason if sr.status in BAD else None
            if sr.status in (Status.completed, Status.failed, Status.blocked):
                sr.finished_at = utcnow()
            self.store.save(state)
        self.notify(
            Event(
                kind="step_finished",
                phase=lp.spec.label,
                step=step.id,
                host=name,
                status=r.status.value,
                message=r.reason or "",
                log_path=r.log_path,
            )
        )
        self._audit_transition(lp, step, name, f"step_{r.status.value}", r.reason or "")
        return r

    def _rollback_host(
        self, lp: LoadedPhase, failed_step: Step, host: Host, rec: PhaseRecord, state: RunState, run_id: str
    ) -> None:
        wanted: set[str] = set()
        for step in lp.spec.steps:
            sr = rec.step(step.id)
            r = sr.hosts.get(host.name) if sr else None
            ran = step.id == failed_step.id or (r is not None and r.status == Status.completed)
            if ran and step.rollback:
                wanted.add(step.rollback)
            if step.id == failed_step.id:
                break
        for rstep in lp.spec.rollback_steps:  # declared order
            if rstep.id not in wanted:
                continue
            sr = rec.step(rstep.id)
            assert sr is not None
            self.notify(
                Event(
                    kind="rollback",
                    phase=lp.spec.label,
                    step=rstep.id,
                    host=host.name,
                    message=f"rolling back after {failed_step.id} failed",
                )
            )
            self._execute(lp, rstep, host, sr, state, run_id)
