"""Record transitions: every change the engine makes to a phase, step or host record, as functions.

docs/state-machine.md lists the states, these transitions and the command that causes each.
Callers hold the execution lock (host threads share one :class:`~orchestrator.state.RunState`)
and persist the state after each call, so a run killed between two calls leaves a file that
tells the truth.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.specs import LoadedPhase, PhaseCatalog, PhaseSpec, Placement
from orchestrator.state import (
    CONTROLLER,
    BundleEvidence,
    HostPhase,
    HostStepResult,
    PhaseRecord,
    RunState,
    Status,
    StepRecord,
    utcnow,
)

if TYPE_CHECKING:
    from orchestrator.shipping import BundleCheck

#: Outcomes that stop a host in a phase.
BAD = (Status.failed, Status.blocked, Status.interrupted)
#: Worst first: the phase status when not every host completed.
WORST = (Status.failed, Status.interrupted, Status.blocked, Status.skipped, Status.pending)


def aggregate_status(sr: StepRecord) -> Status:
    """A step's status from its per-host results: any in_progress/interrupted/failed/blocked wins."""
    sts = [r.status for r in sr.hosts.values()]
    for s in (Status.in_progress, Status.interrupted, Status.failed, Status.blocked):
        if s in sts:
            return s
    if sts and all(s in (Status.completed, Status.skipped) for s in sts):
        return Status.completed if Status.completed in sts else Status.skipped
    return Status.pending


def settle_phase(rec: PhaseRecord, hosts: list[str] | None = None) -> None:
    """The phase's status and reason from its ``hosts`` (default: all it has): completed only when
    each of them completed, else the worst of their statuses with that host's reason."""
    names = [h for h in (hosts if hosts is not None else list(rec.hosts)) if h in rec.hosts]
    sts = [rec.hosts[h].status for h in names]
    if sts and all(s == Status.completed for s in sts):
        rec.status, rec.reason = Status.completed, None
        return
    worst = next((s for s in WORST if s in sts), Status.pending)
    rec.status = worst
    first = next((h for h in names if rec.hosts[h].status == worst), None)
    rec.reason = f"{first}: {rec.hosts[first].reason}" if first and rec.hosts[first].reason else None


# ------------------------------------------------------------------------------ run: phases
def begin_phase(
    state: RunState,
    lp: LoadedPhase,
    hosts: list[str],
    run_id: str,
    bundle_sha: str,
    resume: dict[str, str | None],
) -> PhaseRecord:
    """``run``: the phase goes ``in_progress`` on ``hosts``. A host in ``resume`` (host -> first step
    to run again; None: every step had completed) keeps its completed results of the steps before
    that step; every other result of these hosts is cleared. A new bundle or spec starts a fresh record."""
    spec = lp.spec
    old = state.phase(spec.id)
    fresh = old is None or old.bundle_sha != bundle_sha or old.spec_sha != lp.sha256
    rec = PhaseRecord(id=spec.id, name=spec.name, title=spec.title) if fresh or old is None else old
    rec.status, rec.reason, rec.run_id = Status.in_progress, None, run_id
    rec.started_at, rec.finished_at = utcnow(), None
    rec.bundle_sha, rec.spec_sha = bundle_sha, lp.sha256
    by_id = {s.id: s for s in rec.steps}
    order = [s.id for s in spec.steps]
    rec.steps = []
    for step in list(spec.steps) + list(spec.rollback_steps):
        is_rb = step in spec.rollback_steps
        sr = by_id.get(step.id) or StepRecord(id=step.id, content=step.title)
        sr.content, sr.priority, sr.rollback = step.title, step.priority.value, is_rb
        for h in hosts:
            keep = (
                not is_rb
                and h in resume
                and (resume[h] is None or order.index(step.id) < order.index(str(resume[h])))
                and h in sr.hosts
                and sr.hosts[h].status == Status.completed
            )
            if not keep:
                sr.hosts.pop(h, None)
        if step.runs_on == Placement.local and not resume:
            sr.hosts.pop(CONTROLLER, None)
        sr.status = aggregate_status(sr) if sr.hosts else Status.pending
        sr.reason = None if sr.status in (Status.pending, Status.completed) else sr.reason
        rec.steps.append(sr)
    for h in hosts:
        rec.hosts[h] = HostPhase(status=Status.in_progress, bundle_sha=bundle_sha, spec_sha=lp.sha256)
    state.phases[str(spec.id)] = rec
    return rec


def host_outcome(why: str) -> Status:
    """The host-phase status that a recorded failure reason (``<status>: ...``) stands for."""
    for s in (Status.blocked, Status.skipped, Status.interrupted):
        if why.startswith(s.value):
            return s
    return Status.failed


def finish_phase(lp: LoadedPhase, rec: PhaseRecord, hosts: list[str], failed: dict[str, str]) -> None:
    """``run``: each host's phase result from its step results (``failed``: host -> why it stopped)."""
    main = [s for s in rec.steps if not s.rollback]
    for h in hosts:
        hp = rec.hosts[h]
        hp.finished_at = utcnow()
        results = []
        for s in main:
            local = lp.spec.step(s.id).runs_on == Placement.local
            results.append((s, s.hosts.get(CONTROLLER if local else h)))
        bad = [(s, r) for s, r in results if r is not None and r.status in BAD]
        if h in failed:
            hp.status, hp.reason = host_outcome(failed[h]), failed[h]
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
    settle_phase(rec, hosts)
    rec.finished_at = utcnow()


# ------------------------------------------------------------------------------ run: steps
def start_step(sr: StepRecord, host: str, log_path: Path) -> HostStepResult:
    """A step goes ``in_progress`` on ``host`` (``@local``: this machine)."""
    r = HostStepResult(status=Status.in_progress, started_at=utcnow(), log_path=str(log_path))
    sr.hosts[host] = r
    sr.status = Status.in_progress
    sr.started_at = sr.started_at or r.started_at
    return r


def end_step(sr: StepRecord, host: str, r: HostStepResult) -> None:
    """A step ends on ``host`` with ``r``'s status (completed, failed, blocked, interrupted)."""
    r.finished_at = r.finished_at or utcnow()
    sr.hosts[host] = r
    sr.status = aggregate_status(sr)
    sr.reason = r.reason if sr.status in BAD else None
    if sr.status in (Status.completed, Status.failed, Status.blocked):
        sr.finished_at = utcnow()


def skip_step(sr: StepRecord, host: str, reason: str) -> HostStepResult:
    """A step is not started on ``host`` (another host or wave failed): ``skipped`` with the reason."""
    r = HostStepResult(status=Status.skipped, reason=reason, finished_at=utcnow())
    sr.hosts[host] = r
    sr.status = aggregate_status(sr)
    return r


def mark_interrupted(state: RunState, reason: str) -> int:
    """Every ``in_progress`` item becomes ``interrupted`` with ``reason`` (a signal, or a run that
    died); returns how many step results changed. ``failed`` records (a rollback that did not
    finish) stay ``failed``."""
    n = 0
    for p in state.phases.values():
        for s in p.steps:
            touched = False
            for r in s.hosts.values():
                if r.status == Status.in_progress:
                    r.status, r.reason, r.finished_at = Status.interrupted, reason, r.finished_at or utcnow()
                    touched = True
                    n += 1
            if touched or s.status == Status.in_progress:
                s.status, s.reason = Status.interrupted, reason
        for hp in p.hosts.values():
            if hp.status == Status.in_progress:
                hp.status, hp.reason = Status.interrupted, reason
        if p.status == Status.in_progress:
            p.status, p.reason = Status.interrupted, reason
    return n


# ------------------------------------------------------------------------------ bundle evidence
def record_bundle(hp: HostPhase, check: BundleCheck) -> None:
    """What the bundle check before a step did on the host (``hp.bundle``; a first use starts it anew)."""
    if check.first or hp.bundle is None:
        hp.bundle = BundleEvidence(sha256=check.sha256, remote_dir=check.remote_dir)
    ev = hp.bundle
    if check.verdict is not None:  # the one-round-trip check before a later step
        ev.checks += 1
        ev.verified, ev.last_check, ev.checked_at = check.verdict == "ok", check.verdict, utcnow()
    shipped = check.shipped
    if shipped is not None:
        ev.remote_dir = shipped.remote_dir
        ev.uploaded = ev.uploaded or shipped.uploaded
        ev.unpacked = ev.unpacked or shipped.unpacked
        ev.repaired = ev.repaired or shipped.found not in ("ok", "absent")
        ev.found = shipped.found if check.first or not ev.found else ev.found
        ev.verified, ev.last_check, ev.checked_at = shipped.verified, "ok" if shipped.verified else "failed", utcnow()
        ev.checks += 1
        ev.ship_duration_s = shipped.duration_s
    if check.error is not None and check.call_failed:
        ev.checks += 1
        ev.verified, ev.last_check, ev.checked_at = False, f"error: {check.error.message}", utcnow()


# ------------------------------------------------------------------------------ rollback
def begin_rollback(
    rec: PhaseRecord, host: str, rollback_ids: list[str], run_id: str, command: str, hosts: list[str] | None
) -> None:
    """Before a rollback step runs on ``host`` (automatic or ``orchestrator rollback``): the phase
    is ``failed`` there, with a reason that stays true if the rollback never finishes. ``hosts``:
    settle the phase status over them (``orchestrator rollback``; a run settles it when the phase ends)."""
    hp = rec.hosts.setdefault(host, HostPhase())
    hp.status = Status.failed
    hp.reason = (
        f"rollback ({', '.join(rollback_ids)}) started in run {run_id} at {utcnow()} and has not finished: "
        f"the host may be half rolled back; `{command}` runs it again"
    )
    if hosts is not None:
        settle_phase(rec, hosts)


def undo_steps(spec: PhaseSpec, rec: PhaseRecord, host: str, rollback_ids: set[str]) -> list[str]:
    """After rollback steps ran on ``host`` (whatever their outcome): every *completed* result of
    the steps they undo, from the first step naming one of them on, becomes ``pending`` (its
    effect on the host is gone or uncertain); failed results stay as evidence. Returns the step ids reset."""
    reset: list[str] = []
    started = False
    when = utcnow()
    for step in spec.steps:
        started = started or (step.rollback is not None and step.rollback in rollback_ids)
        if not started or step.runs_on == Placement.local:
            continue
        sr = rec.step(step.id)
        r = sr.hosts.get(host) if sr else None
        if sr is None or r is None or r.status != Status.completed:
            continue
        sr.hosts[host] = HostStepResult(
            status=Status.pending,
            reason=f"undone by rollback ({', '.join(sorted(rollback_ids))}) at {when}",
            log_path=r.log_path,
            command=r.command,
        )
        sr.status = aggregate_status(sr)
        sr.reason = None
        reset.append(step.id)
    return reset


def end_rollback(rec: PhaseRecord, host: str, status: Status, reason: str, hosts: list[str] | None) -> None:
    """A rollback ended on ``host``: ``pending`` (rolled back, runs again from the first undone step)
    or ``failed`` with the reason (a failed step that was rolled back, or a failed rollback)."""
    hp = rec.hosts.setdefault(host, HostPhase())
    hp.status, hp.reason, hp.finished_at = status, reason, utcnow()
    if hosts is not None:
        settle_phase(rec, hosts)


def depends_on(catalog: PhaseCatalog, lp: LoadedPhase, phase_id: int) -> bool:
    """Whether ``lp`` requires ``phase_id``, directly or through its predecessors."""
    seen: set[int] = set()
    req = lp.spec.requires
    while req is not None and req not in seen:
        if req == phase_id:
            return True
        seen.add(req)
        prev = catalog.by_id(req)
        req = prev.spec.requires if prev else None
    return False


def reset_dependents(state: RunState, catalog: PhaseCatalog, phase_id: int, host: str, why: str) -> list[str]:
    """Phases that depend on a phase rolled back on ``host`` lose their results there: the host's
    phase record and step results become ``pending`` with ``why``. Returns their labels."""
    out: list[str] = []
    for lp in catalog.phases:
        rec = state.phase(lp.spec.id)
        if rec is None or host not in rec.hosts or not depends_on(catalog, lp, phase_id):
            continue
        hp = rec.hosts[host]
        hp.status, hp.reason = Status.pending, why
        for sr in rec.steps:
            r = sr.hosts.get(host)
            if r is not None:
                sr.hosts[host] = HostStepResult(status=Status.pending, reason=why, log_path=r.log_path)
                sr.status = aggregate_status(sr)
        settle_phase(rec)
        out.append(lp.spec.label)
    return out
