"""Runs the planned commands of one command on hosts: the pool, waves, failure policy, rollback.

:class:`Execution` is the engine's collaborator for everything that touches hosts. It runs
exactly the commands of the plan it is given (argv, cwd, timeout as planned and shown by
``plan``/``--dry-run``); it never renders a command. Every transition of a record goes
through :mod:`orchestrator.records` under one lock and is persisted at once, so a run killed
at any point leaves state that tells the truth.

**Placement**: ``local`` steps run once on this machine (recorded under host ``@local``; a
failure fails the phase on every host); ``each_host`` steps run on all active hosts in parallel
(at most ``forks`` at a time); consecutive ``canary_then_rest`` steps form one block that runs
wave by wave (canary alone first), every host running the whole block; a failure in a wave
stops the later waves. **Failure policy**: ``fail_fast`` stops starting the step on more hosts
after the first failure and ends the phase; ``continue`` drops failed hosts and goes on while at
most ``max_failed_hosts`` failed (None: no limit). **Rollback**: when a step fails on a host,
the rollback steps named by that step and by the steps that completed before it on that host
run there, in the order ``rollback_steps`` lists them; never after a stop signal.
"""

from __future__ import annotations

import concurrent.futures as cf
import functools
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel

from orchestrator import facts, records
from orchestrator.approval import Approvals
from orchestrator.errors import HostUnreachable, OrchestratorError, StateConflict
from orchestrator.inventory import Host, Inventory
from orchestrator.invocation import paste_command
from orchestrator.outcome import interpret
from orchestrator.planner import PhasePlan, PlannedCommand, waves_for
from orchestrator.progress import NULL_PROGRESS, ProgressSink
from orchestrator.records import BAD
from orchestrator.shipping import BundleShipper, ships_bundle
from orchestrator.specs import LoadedPhase, PhaseCatalog, PhaseSpec, Placement, Step
from orchestrator.state import (
    CONTROLLER,
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
T = TypeVar("T")

__all__ = ["BAD", "Event", "Execution"]


class Event(BaseModel):
    """A progress event for the UI (the engine never prints)."""

    kind: str  # phase_started | phase_finished | step_started | step_finished | rollback | message | warning
    phase: str | None = None
    step: str | None = None
    host: str | None = None
    status: str | None = None
    message: str = ""
    log_path: str | None = None


class Execution:
    """Runs planned phases (or their rollback steps) of one command and records every transition."""

    def __init__(
        self,
        *,
        catalog: PhaseCatalog,
        inventory: Inventory,
        state: RunState,
        store: StateStore,
        shipper: BundleShipper,
        approvals: Approvals,
        transport_factory: TransportFactory,
        run_id: str,
        forks: int,
        values: dict[str, dict[str, str | None]],
        notify: Callable[[Event], None],
        progress: ProgressSink = NULL_PROGRESS,
    ) -> None:
        self.catalog = catalog
        self.inventory = inventory
        self.state = state
        self.store = store
        self.shipper = shipper
        self.approvals = approvals
        self.transport_factory = transport_factory
        self.run_id = run_id
        self.forks = forks
        self.values = values
        self.notify = notify
        self.progress = progress
        self.stop = threading.Event()
        self.warnings: list[str] = []
        self.touched = False  # a phase record was written (a refusal before that changes nothing)
        self._mu = threading.RLock()
        self._transports: dict[str, Transport] = {}
        self._commands: dict[tuple[int, str, str], PlannedCommand] = {}

    # ------------------------------------------------------------------ state and transports
    def save(self) -> None:
        with self._mu:
            self.store.save(self.state)

    def interrupt(self, reason: str) -> None:
        """Stop: no new command starts, local process groups are killed, in_progress -> interrupted."""
        self.stop.set()
        terminate_all()
        self.close()
        with self._mu:
            if records.mark_interrupted(self.state, reason) or self.touched:
                self.store.save(self.state)

    def halt(self, reason: str) -> None:
        """Stop starting commands (the run cannot go on, e.g. the bundle changed); in_progress -> interrupted."""
        self.stop.set()
        with self._mu:
            records.mark_interrupted(self.state, reason)

    def close(self) -> None:
        for t in list(self._transports.values()):
            try:
                t.close()
            except Exception:  # noqa: BLE001 - closing is best effort
                pass
        self._transports.clear()

    def _transport(self, host: Host | None) -> Transport:
        key = host.name if host else CONTROLLER
        with self._mu:
            t = self._transports.get(key)
        if t is None:
            t = LocalTransport(CONTROLLER) if host is None else self.transport_factory(host)
            with self._mu:
                self._transports[key] = t
        return t

    def _pool_map(self, fn: Callable[[Host], T], hosts: list[Host]) -> dict[str, T]:
        """Run ``fn`` per host on a thread pool; the main thread waits in short slices so that a
        KeyboardInterrupt (SIGINT, or SIGTERM turned into one by the CLI) is handled at once."""
        out: dict[str, T] = {}
        if not hosts:
            return out
        ex = cf.ThreadPoolExecutor(max_workers=min(self.forks, len(hosts)), thread_name_prefix="orchestrator-host")
        try:
            futs = {ex.submit(fn, h): h.name for h in hosts}
            pending = set(futs)
            while pending:
                done, pending = cf.wait(pending, timeout=0.2)
                for f in done:
                    out[futs[f]] = f.result()
        except BaseException:
            self.stop.set()
            terminate_all()
            ex.shutdown(wait=False, cancel_futures=True)
            raise
        ex.shutdown(wait=True)
        return out

    def _index(self, pp: PhasePlan) -> None:
        for ps in list(pp.steps) + list(pp.rollback_steps):
            for c in ps.commands:
                self._commands[(pp.id, ps.id, c.host)] = c

    # ------------------------------------------------------------------ a phase
    def run_phase(self, lp: LoadedPhase, pp: PhasePlan, hosts: list[Host]) -> PhaseRecord:
        """Run the phase's planned steps on ``hosts`` (resuming where the plan says so)."""
        spec = lp.spec
        self._index(pp)
        names = [h.name for h in hosts]
        self.notify(Event(kind="phase_started", phase=spec.label, message=f"{spec.title} ({len(hosts)} hosts)"))
        resume = {a.host: a.from_step for a in pp.actions if a.action == "resume"}
        with self._mu:
            rec = records.begin_phase(self.state, lp, names, self.run_id, self.shipper.sha, resume)
            self.touched = True
            self.store.save(self.state)
        active = list(hosts)
        failed: dict[str, str] = {}
        i = 0
        steps = spec.steps
        while i < len(steps) and not self.stop.is_set():
            if steps[i].runs_on == Placement.canary_then_rest:
                j = i
                while j < len(steps) and steps[j].runs_on == Placement.canary_then_rest:
                    j += 1
                active = self._run_waves(lp, steps[i:j], active, rec, failed)
                i = j
            else:
                active = self._run_step(lp, steps[i], active, rec, failed)
                i += 1
            if not active or _halted(spec, failed):
                break
        with self._mu:
            records.finish_phase(lp, rec, names, failed)
            self.store.save(self.state)
        self.notify(Event(kind="phase_finished", phase=spec.label, status=rec.status.value, message=rec.reason or ""))
        return rec

    def _run_step(
        self, lp: LoadedPhase, step: Step, active: list[Host], rec: PhaseRecord, failed: dict[str, str]
    ) -> list[Host]:
        sr = _step_record(rec, step.id)
        if step.runs_on == Placement.local:
            prev = sr.hosts.get(CONTROLLER)
            if prev is None or prev.status != Status.completed:
                r = self._execute(lp, step, None, sr)
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
            if self.stop.is_set() or (policy.mode == "fail_fast" and first_failure.is_set()):
                return self._skip(sr, host.name, "not started: another host failed (fail_fast)")
            r = self._execute(lp, step, host, sr)
            if r.status in BAD:
                first_failure.set()
            return r

        results = self._pool_map(one, active)
        still = []
        for h in active:
            r = results[h.name]
            if r.status in BAD:
                failed[h.name] = self._rollback_host(lp, step, h, rec, f"{r.status.value}: step {step.id}: {r.reason}")
            elif r.status == Status.completed:
                still.append(h)
        return still

    def _run_waves(
        self, lp: LoadedPhase, block: list[Step], active: list[Host], rec: PhaseRecord, failed: dict[str, str]
    ) -> list[Host]:
        waves = waves_for(active, self.inventory, lp.spec.waves)
        done: list[Host] = []
        for wi, wave in enumerate(waves):
            if self.stop.is_set():
                break

            def chain(host: Host, wave_no: int = wi + 1) -> HostStepResult | None:
                for step in block:
                    sr = _step_record(rec, step.id)
                    prev = sr.hosts.get(host.name)
                    if prev is not None and prev.status == Status.completed:
                        continue
                    if self.stop.is_set():
                        return HostStepResult(status=Status.interrupted, reason="not started: the run was stopped")
                    r = self._execute(lp, step, host, sr)
                    if r.status in BAD:
                        why = f"{r.status.value}: step {step.id} (wave {wave_no}): {r.reason}"
                        failed[host.name] = self._rollback_host(lp, step, host, rec, why)
                        return r
                return None

            results = self._pool_map(chain, wave)
            bad = [h for h in wave if results[h.name] is not None]
            done += [h for h in wave if results[h.name] is None]
            if bad:
                for h in [h for w in waves[wi + 1 :] for h in w]:
                    for step in block:
                        self._skip(
                            _step_record(rec, step.id), h.name, f"not started: wave {wi + 1} failed on {bad[0].name}"
                        )
                    failed.setdefault(h.name, f"skipped: wave {wi + 1} failed on {bad[0].name}")
                return []
        return done

    def _skip(self, sr: StepRecord, host: str, reason: str) -> HostStepResult:
        with self._mu:
            r = records.skip_step(sr, host, reason)
            self.store.save(self.state)
        return r

    # ------------------------------------------------------------------ rollback
    def _rollback_host(self, lp: LoadedPhase, failed_step: Step, host: Host, rec: PhaseRecord, why: str) -> str:
        """Roll ``host`` back after ``failed_step`` failed there (``why``); the host's final reason."""
        spec = lp.spec
        wanted: set[str] = set()
        for step in spec.steps:
            sr = rec.step(step.id)
            r = sr.hosts.get(host.name) if sr else None
            ran = step.id == failed_step.id or (r is not None and r.status == Status.completed)
            if ran and step.rollback:
                wanted.add(step.rollback)
            if step.id == failed_step.id:
                break
        rids = [r.id for r in spec.rollback_steps if r.id in wanted]
        if not rids:
            return why
        if self.stop.is_set():
            return f"{why}; not rolled back: the run was stopped (`{paste_command('rollback', str(spec.id))}` rolls it back)"
        with self._mu:
            records.begin_rollback(rec, host.name, rids, self.run_id, f"orchestrator rollback {spec.id}", None)
            self.store.save(self.state)
        bad: tuple[str, str] | None = None
        for rstep in spec.rollback_steps:
            if rstep.id not in wanted:
                continue
            if self.stop.is_set():
                bad = bad or (rstep.id, "not run: the run was stopped")
                break
            self.notify(
                Event(
                    kind="rollback",
                    phase=spec.label,
                    step=rstep.id,
                    host=host.name,
                    message=f"rolling back after {failed_step.id} failed",
                )
            )
            res = self._execute(lp, rstep, host, _step_record(rec, rstep.id))
            if res.status != Status.completed and bad is None:
                bad = (rstep.id, res.reason or res.status.value)
        if bad is None:
            final = f"{why}; rolled back ({', '.join(rids)})"
        else:
            final = f"failed: rollback {bad[0]} did not complete ({bad[1]}) after {why}"
        with self._mu:
            records.undo_steps(spec, rec, host.name, set(rids))
            records.reset_dependents(
                self.state, self.catalog, spec.id, host.name, f"phase {spec.label} was rolled back on {host.name}"
            )
            records.end_rollback(rec, host.name, records.host_outcome(final), final, None)
            self.store.save(self.state)
        return final

    def rollback_phase(self, lp: LoadedPhase, pp: PhasePlan, hosts: list[Host], command: str) -> PhaseRecord:
        """``orchestrator rollback``: run the phase's rollback steps on ``hosts`` (declared order)."""
        spec = lp.spec
        self._index(pp)
        names = [h.name for h in hosts]
        rids = [s.id for s in spec.rollback_steps]
        with self._mu:
            rec = self.state.phase(spec.id) or PhaseRecord(id=spec.id, name=spec.name, title=spec.title)
            self.state.phases[str(spec.id)] = rec
            for h in names:
                records.begin_rollback(rec, h, rids, self.run_id, command, names)
            self.touched = True
            self.store.save(self.state)
        bad: dict[str, tuple[str, str]] = {}
        for rstep in spec.rollback_steps:
            sr = rec.step(rstep.id)
            if sr is None:
                sr = StepRecord(id=rstep.id, content=rstep.title, priority=rstep.priority.value, rollback=True)
                with self._mu:
                    rec.steps.append(sr)
            results = self._pool_map(functools.partial(self._execute_on, lp, rstep, sr), hosts)
            for h in names:
                res = results[h]
                if res.status != Status.completed:
                    bad.setdefault(h, (rstep.id, res.reason or res.status.value))
        when = utcnow()
        with self._mu:
            for h in names:
                records.undo_steps(spec, rec, h, set(rids))
                records.reset_dependents(
                    self.state, self.catalog, spec.id, h, f"phase {spec.label} was rolled back on {h}"
                )
                if h in bad:
                    rid, why = bad[h]
                    records.end_rollback(rec, h, Status.failed, f"rollback {rid}: {why}", names)
                else:
                    records.end_rollback(rec, h, Status.pending, f"rolled back ({', '.join(rids)}) at {when}", names)
            self.store.save(self.state)
        return rec

    # ------------------------------------------------------------------ one step on one host
    def _execute_on(self, lp: LoadedPhase, step: Step, sr: StepRecord, host: Host) -> HostStepResult:
        return self._execute(lp, step, host, sr)

    def _execute(self, lp: LoadedPhase, step: Step, host: Host | None, sr: StepRecord) -> HostStepResult:
        """Run one planned step on one host (None = this machine), record every transition, return the result."""
        spec = lp.spec
        name = host.name if host else CONTROLLER
        cmd = self._commands[(spec.id, step.id, name)]
        log_path = log_dir(self.store.dir, self.run_id, name) / f"{spec.label}-{step.id}.log"
        with self._mu:
            r = records.start_step(sr, name, log_path)
            self.store.save(self.state)
        self.notify(Event(kind="step_started", phase=spec.label, step=step.id, host=name))
        self.progress.step_started(name, spec.label, step.id)
        self._audit(spec, step, name, "step_started", "")
        started = time.monotonic()
        try:
            transport = self._transport(host)
            if host is not None and ships_bundle(host, spec.needs_approval):
                self._check_bundle(lp, step, host, transport)
            if step.builtin == "facts":
                python = cmd.argv[1]
                r.command = f"<builtin:facts> ({python})"
                result = facts.collect(
                    transport,
                    python,
                    cwd=cmd.cwd,
                    timeout_s=cmd.timeout_s,
                    log_path=log_path,
                    service_python=host.service.python if host else None,
                    family_root=host.remote_root if host is not None and host.model_family == "auto" else None,
                )
            else:
                r.command = cmd.display
                if host is not None and not host.is_local:
                    log_path.parent.mkdir(parents=True, exist_ok=True)
                result = transport.run(cmd.argv, timeout_s=cmd.timeout_s, cwd=cmd.cwd, log_path=log_path)
            outcome = interpret(step, result, self.values.get(name, {}))
            for w in getattr(transport, "drain_warnings", list)():  # once each: login banner, known_hosts lines
                with self._mu:
                    self.warnings.append(w)
                self.notify(Event(kind="warning", phase=spec.label, host=name, message=w))
            r.exit_code, r.duration_s = result.exit_code, round(result.duration_s, 3)
            r.status, r.reason, r.metrics, r.gates = outcome.status, outcome.reason, outcome.metrics, outcome.gates
        except HostUnreachable as exc:
            r.status, r.reason = Status.failed, f"unreachable: {exc.message}"
        except StateConflict as exc:  # the bundle changed under this run: record it, then stop the run (exit 6)
            r.status, r.reason = Status.failed, exc.message
            self.stop.set()
            with self._mu:
                records.end_step(sr, name, r)
                sr.reason = r.reason
                self.store.save(self.state)
            self.progress.step_finished(name, spec.label, step.id, r.status.value, time.monotonic() - started)
            raise
        except OrchestratorError as exc:  # spec problems, bundle errors (BundleError) ...
            r.status, r.reason = Status.failed, exc.message
        except Exception as exc:  # noqa: BLE001 - a transport bug must not leave the step in_progress
            log.exception("step %s on %s raised", step.id, name)
            r.status, r.reason = Status.failed, f"internal error while running the step: {type(exc).__name__}: {exc}"
        if self.stop.is_set() and r.status != Status.completed:
            r.status, r.reason = Status.interrupted, "interrupted by signal while running"
        with self._mu:
            records.end_step(sr, name, r)
            self.store.save(self.state)
        self.progress.step_finished(name, spec.label, step.id, r.status.value, time.monotonic() - started)
        self.notify(
            Event(
                kind="step_finished",
                phase=spec.label,
                step=step.id,
                host=name,
                status=r.status.value,
                message=r.reason or "",
                log_path=r.log_path,
            )
        )
        self._audit(spec, step, name, f"step_{r.status.value}", r.reason or "")
        return r

    def _check_bundle(self, lp: LoadedPhase, step: Step, host: Host, transport: Transport) -> None:
        """The bundle check before a step on a host that gets the bundle (see :mod:`orchestrator.shipping`)."""
        spec = lp.spec
        check = self.shipper.check(transport, host, spec.id, spec.label, step.id, rollback=step in spec.rollback_steps)
        with self._mu:
            rec = self.state.phase(spec.id)
            if rec is not None:
                records.record_bundle(rec.hosts.setdefault(host.name, HostPhase()), check)
            if check.warning:
                self.warnings.append(check.warning)
        if check.warning:
            self.notify(Event(kind="warning", phase=spec.label, host=host.name, message=check.warning))
        if check.error is not None:
            raise check.error

    def _audit(self, spec: PhaseSpec, step: Step, host: str, decision: str, detail: str) -> None:
        """Audit a transition of a step that changes a service (a step of a phase that needs
        approval, or any rollback step), with the digest approved for it."""
        if spec.needs_approval or step in spec.rollback_steps:
            self.approvals.audit_step(spec.id, spec.label, host, step.id, decision, detail)


def _step_record(rec: PhaseRecord, step_id: str) -> StepRecord:
    sr = rec.step(step_id)
    if sr is None:
        raise KeyError(f"phase record {rec.id} has no step {step_id}")
    return sr


def _halted(spec: PhaseSpec, failed: dict[str, str]) -> bool:
    if not failed:
        return False
    if spec.failure_policy.mode == "fail_fast":
        return True
    limit = spec.failure_policy.max_failed_hosts
    return limit is not None and len(failed) > limit


def log_dir(state_dir: Path, run_id: str, host: str) -> Path:
    """``<state_dir>/runs/<run_id>/<host>``: the step logs of one host (``@local``: this machine)."""
    return state_dir / "runs" / run_id / host
