"""What a run would do, per phase and host: the commands, each host's action, the digest.

The plan is computed without connecting anywhere: commands are rendered from the phase
specs and the inventory (placeholders, plans/0001 §4) and shown exactly as they are sent
(``render_remote_command`` for ssh hosts, ``cd <cwd> && shlex.join`` for local ones). The
engine builds it once per command and :mod:`orchestrator.execution` runs exactly these
commands (argv, cwd, timeout). Digests: :mod:`orchestrator.digest`.
"""

from __future__ import annotations

import math
import shlex
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from orchestrator.digest import phase_digest, plan_digest
from orchestrator.errors import SpecError
from orchestrator.inventory import Host, Inventory
from orchestrator.invocation import paste_command
from orchestrator.paths import bundle_source
from orchestrator.placeholders import render
from orchestrator.shipping import ships_bundle
from orchestrator.specs import LoadedPhase, PhaseCatalog, PhaseSpec, Placement, Step
from orchestrator.state import CONTROLLER, RunState, Status
from orchestrator.transport.remote_command import render_remote_command

__all__ = ["CONTROLLER", "HostAction", "Plan", "PhasePlan", "PlannedCommand", "PlannedStep", "build_plan"]


def bundle_dir_for(host: Host | None, bundle_sha: str, root: Path | None = None) -> str:
    """``cwd`` of step commands: the checkout's ``kernels/`` (under ``root``) locally,
    ``<remote_root>/bundles/<sha>`` (the same tree, unpacked) over ssh."""
    if host is None or host.is_local:
        return str(bundle_source(root))
    return f"{host.remote_root.rstrip('/')}/bundles/{bundle_sha}"


#: Where ``model_family: auto`` hosts get their family: phase 0's facts step (the probe's
#: resolution of the service's launch arguments and config.json, ``model.family``).
FAMILY_FACT = (0, "facts", "model.family")
FAMILIES = ("dense_mla", "dsa")


def recorded_family(host: Host, state: RunState) -> str | None:
    """The family phase 0's facts derived for ``host`` (None: not recorded, or not one the
    bundle serves)."""
    phase_id, step_id, metric = FAMILY_FACT
    rec = state.phase(phase_id)
    sr = rec.step(step_id) if rec else None
    r = sr.hosts.get(host.name) if sr else None
    value = r.metrics.get(metric) if r is not None else None
    return value if value in FAMILIES else None


def model_family(host: Host, state: RunState) -> str | None:
    """The concrete family a host's steps run for: the inventory's, or for ``auto`` the recorded one."""
    return recorded_family(host, state) if host.model_family == "auto" else host.model_family


def uses_family(spec: PhaseSpec) -> bool:
    return any(s.uses_family() for s in list(spec.steps) + list(spec.rollback_steps))


def host_values(
    host: Host | None,
    bundle_sha: str,
    state_dir: Path,
    root: Path | None = None,
    family: str | None = None,
) -> dict[str, str | None]:
    """Placeholder values for ``host`` (None = the controller, for ``runs_on: local`` steps);
    ``family``: the host's resolved model family (default: the inventory's, None for ``auto``)."""
    if host is None:
        return {
            "python": sys.executable,
            "bundle_dir": str(bundle_source(root)),
            "bundle_sha": bundle_sha,
            "host": CONTROLLER,
            "state_host_dir": str((state_dir / "hosts" / CONTROLLER).resolve()),
        }
    python = host.python or (sys.executable if host.is_local else "python3")
    return {
        "python": python,
        "arch": host.arch,
        "model_family": family if family is not None else (None if host.model_family == "auto" else host.model_family),
        "host": host.name,
        "address": host.address,
        "bundle_dir": bundle_dir_for(host, bundle_sha, root),
        "bundle_sha": bundle_sha,
        "remote_root": host.remote_root,
        "service_python": host.service.python,
        "health_url": host.service.health_url,
        "generate_url": host.service.generate_url,
        "restart_json": host.restart_json(),
        "health_timeout_s": f"{host.service.health_timeout_s:g}",
        "state_host_dir": str((state_dir / "hosts" / host.name).resolve()) if host.is_local else None,
    }


_PLACEHOLDER_FIELD = {
    "service_python": "service.python",
    "health_url": "service.health_url",
    "generate_url": "service.generate_url",
    "restart_json": "service.restart",
    "arch": "arch",
    "model_family": "model_family (auto: derived by phase 0's facts; run phase 0 first)",
    "state_host_dir": "connection (state_host_dir exists only for local hosts)",
}


class PlannedCommand(BaseModel):
    """One step on one host as it is run: ``argv`` in ``cwd`` for at most ``timeout_s`` (the step's
    ``timeout_s``, capped by the host's ``command_timeout_s``)."""

    host: str
    argv: list[str]
    display: str  # exactly what is executed: shlex.join locally, the remote shell line over ssh
    cwd: str
    timeout_s: float
    wave: int | None = None
    model_family: str | None = None  # the host's family when the step differs per family


class PlannedStep(BaseModel):
    id: str
    title: str
    runs_on: str
    requires_approval: bool
    rollback: str | None = None
    changes: str | None = None
    waves: list[list[str]] = Field(default_factory=list)
    commands: list[PlannedCommand] = Field(default_factory=list)


class PlannedShip(BaseModel):
    """The bundle action on one host before the phase's steps (no connection is made to plan it):
    one host-side hash check (``orchestrator.bundle.check_argv``); the tarball is uploaded only
    when the host has no copy with this sha256, and unpacked (``unpack_argv``) when the tree is
    missing or differs from its manifest; the check is repeated before every later step."""

    host: str
    action: str = "ship"
    sha256: str
    remote_dir: str  # <remote_root>/bundles/<sha>
    tarball: str  # <remote_root>/bundles/<sha>.tar.gz
    display: str  # "ship <sha12> -> <remote_dir>"


class HostAction(BaseModel):
    host: str
    action: str  # run | resume | up_to_date | refused
    detail: str = ""
    from_step: str | None = None  # resume: the first step that runs again
    model_family: str | None = None  # set when the phase's steps differ per family: which ones run

    def describe(self) -> str:
        """``+ run``, ``~ resume from switch``, ``= up_to_date``, ``! refused``; ``[dsa]`` after it
        when the phase runs a family's kernel and route."""
        sym = {"run": "+", "resume": "~", "up_to_date": "=", "refused": "!"}.get(self.action, "?")
        what = f"resume from {self.from_step}" if self.action == "resume" and self.from_step else self.action
        return f"{sym} {what}" + (f" [{self.model_family}]" if self.model_family else "")


class PhasePlan(BaseModel):
    id: int
    name: str
    label: str
    title: str
    spec_path: str
    spec_sha: str
    requires: int | None
    needs_approval: bool  # the spec has steps that change a live service
    to_approve: bool = False  # running this plan asks for approval: needs_approval and a host runs or resumes it
    undo: str
    digest: str
    hosts: list[str]
    actions: list[HostAction]
    bundle: list[PlannedShip] = Field(default_factory=list)  # ssh hosts (and local ones in service-changing phases)
    steps: list[PlannedStep]
    rollback_steps: list[PlannedStep]
    problems: list[str] = Field(default_factory=list)


class Plan(BaseModel):
    digest: str
    bundle_sha: str
    inventory: str
    hosts: list[str]
    phases: list[PhasePlan]
    evidence: dict[str, Any]
    problems: list[str] = Field(default_factory=list)
    #: each host's model family (dense_mla | dsa; ``auto (not derived yet)``): which kernel and route its steps run
    families: dict[str, str] = Field(default_factory=dict)
    #: placeholder values per host (``@local`` for the controller); not shown, used for gate values
    values: dict[str, dict[str, str | None]] = Field(default_factory=dict, exclude=True)

    @property
    def needs_approval(self) -> bool:
        """Whether running this plan asks for approval (a phase up to date everywhere does not)."""
        return any(p.to_approve for p in self.phases)

    def phase(self, phase_id: int) -> PhasePlan:
        return next(p for p in self.phases if p.id == phase_id)

    def problem_errors(self) -> list[dict[str, Any]]:
        """The plan's problems as envelope errors (exit 3)."""
        return [SpecError(p).to_dict() for p in self.problems]


def render_step(
    step: Step, host: Host | None, values: dict[str, str | None], *, inventory_path: Path, phase_label: str
) -> list[str]:
    """Fill the step's argv for one host; a placeholder without a value is a SpecError naming the field."""
    out = []
    for arg in step.command or []:
        try:
            out.append(render(arg, values))
        except KeyError as exc:
            name = exc.args[0]
            where = (
                f"{inventory_path}:hosts({host.name}).{_PLACEHOLDER_FIELD.get(name, name)}"
                if host
                else f"phase {phase_label} step {step.id}"
            )
            raise SpecError(
                f"{where}: needed by phase {phase_label} step {step.id} ({{{name}}}) but not set",
                host=host.name if host else None,
                phase=phase_label,
            ) from None
    return out


def display_command(host: Host | None, argv: list[str], cwd: str, timeout_s: float) -> str:
    if host is not None and not host.is_local:
        return render_remote_command(argv, cwd=cwd, timeout_s=timeout_s)
    return f"cd {shlex.quote(cwd)} && {shlex.join(argv)}"


def waves_for(hosts: list[Host], inventory: Inventory, waves: list[int | str]) -> list[list[Host]]:
    """The canary (first selected host of group ``canary``, else the first host) alone, then the
    others in waves sized by ``waves[1:]`` (``N`` hosts or ``'P%'`` of all selected hosts), then
    one last wave with whatever remains. ``[1, 2, '50%']`` on 10 hosts -> 1, 2, 5, 2."""
    if not hosts:
        return []
    canary = inventory.canary(hosts)
    rest = [h for h in hosts if h.name != canary.name]
    out: list[list[Host]] = [[canary]]
    i = 0
    for w in waves[1:]:
        if i >= len(rest):
            break
        n = w if isinstance(w, int) else max(1, math.ceil(len(hosts) * int(w[:-1]) / 100))
        out.append(rest[i : i + n])
        i += n
    if i < len(rest):
        out.append(rest[i:])
    return out


def plan_step(
    step: Step,
    lp: LoadedPhase,
    hosts: list[Host],
    inventory: Inventory,
    bundle_sha: str,
    state_dir: Path,
    cache: dict[str, dict[str, str | None]] | None = None,
    root: Path | None = None,
) -> PlannedStep:
    ps = PlannedStep(
        id=step.id,
        title=step.title,
        runs_on=step.runs_on.value,
        requires_approval=step.requires_approval,
        rollback=step.rollback,
        changes=step.changes,
    )
    if step.runs_on == Placement.local:
        targets: list[tuple[Host | None, int | None]] = [(None, None)]
    elif step.runs_on == Placement.canary_then_rest:
        w = waves_for(hosts, inventory, lp.spec.waves)
        ps.waves = [[h.name for h in wave] for wave in w]
        targets = [(h, i) for i, wave in enumerate(w) for h in wave]
    else:
        targets = [(h, None) for h in hosts]
    cache = {} if cache is None else cache
    by_family = step.uses_family()
    variants: dict[str | None, Step] = {}
    for host, wave in targets:
        key = host.name if host else CONTROLLER
        values = cache.get(key)
        if values is None:
            values = cache[key] = host_values(host, bundle_sha, state_dir, root)
        family = values.get("model_family")
        if by_family and host is not None and family is None:
            continue  # model_family auto, not derived yet: build_plan refuses the phase on this host
        hstep = variants.get(family)
        if hstep is None:
            hstep = variants[family] = step.for_family(family)
        cwd = values["bundle_dir"] or str(bundle_source(root))
        timeout_s = hstep.timeout_s if host is None else min(hstep.timeout_s, host.command_timeout_s)
        if step.builtin:
            argv = [f"<builtin:{step.builtin}>", values["python"] or "python3"]
            display = (
                f"(built-in {step.builtin}: nvcc --version; nvidia-smi --query-gpu=...; "
                f"{values['python']} -c <torch probe>; {values.get('service_python') or values['python']} "
                "-c <sglang version probe>)"
            )
        else:
            argv = render_step(hstep, host, values, inventory_path=inventory.path, phase_label=lp.spec.label)
            display = display_command(host, argv, cwd, timeout_s)
        # built from already-validated values: skip re-validation (1500 commands for 100 hosts)
        ps.commands.append(
            PlannedCommand.model_construct(
                host=key,
                argv=argv,
                display=display,
                cwd=cwd,
                timeout_s=timeout_s,
                wave=wave,
                model_family=family if by_family else None,
            )
        )
    titles = {v.title for v in variants.values()}
    if by_family and len(titles) == 1:  # every host runs one variant: its title (else the step's own)
        ps.title = titles.pop()
    return ps


def ship_action(host: Host, bundle_sha: str) -> PlannedShip:
    d = f"{host.remote_root.rstrip('/')}/bundles/{bundle_sha}"
    return PlannedShip.model_construct(
        host=host.name,
        action="ship",
        sha256=bundle_sha,
        remote_dir=d,
        tarball=d + ".tar.gz",
        display=f"ship {bundle_sha[:12]} -> {d}",
    )


#: Host-phase statuses from which a run resumes (keeps the completed steps before the first undone one).
RESUMABLE = (Status.interrupted, Status.in_progress, Status.failed, Status.blocked, Status.pending)


def host_action(
    lp: LoadedPhase, host: Host, state: RunState, catalog: PhaseCatalog, bundle_sha: str, selected_ids: set[int]
) -> HostAction:
    rec = state.phase(lp.spec.id)
    hp = rec.hosts.get(host.name) if rec else None
    req = lp.spec.requires
    if req is not None and req not in selected_ids:
        prev = state.phase(req)
        prev_host = prev.hosts.get(host.name) if prev else None
        if prev_host is None or prev_host.status != Status.completed or prev_host.bundle_sha != bundle_sha:
            prev_lp = catalog.by_id(req)
            label = prev_lp.spec.label if prev_lp else str(req)
            why = (
                "has not passed"
                if prev_host is None or prev_host.status != Status.completed
                else f"passed with another bundle ({(prev_host.bundle_sha or '')[:12]})"
            )
            return HostAction(
                host=host.name,
                action="refused",
                detail=f"phase {label} {why} on {host.name}; run `{paste_command('run', str(req))}` first",
            )
    if rec is not None and hp is not None and hp.bundle_sha == bundle_sha and hp.spec_sha == lp.sha256:
        if hp.status == Status.completed:
            return HostAction(host=host.name, action="up_to_date", detail="passed with this bundle and spec")
        done: list[str] = []
        for step in lp.spec.steps:
            sr = rec.step(step.id)
            r = sr.hosts.get(CONTROLLER if step.runs_on == Placement.local else host.name) if sr else None
            if r is None or r.status != Status.completed:
                break
            done.append(step.id)
        # pending: rolled back (the undone steps were reset, the others kept)
        if done and hp.status in RESUMABLE:
            if len(done) == len(lp.spec.steps):  # every step completed; the run ended before the phase did
                return HostAction(
                    host=host.name, action="resume", detail=f"{hp.status.value}; every step completed, keeps them"
                )
            first = lp.spec.steps[len(done)].id
            return HostAction(
                host=host.name,
                action="resume",
                from_step=first,
                detail=f"{hp.status.value}; from {first}, keeps {', '.join(done)}",
            )
    return HostAction(host=host.name, action="run")


def build_plan(
    catalog: PhaseCatalog,
    selected: list[LoadedPhase],
    inventory: Inventory,
    hosts: list[Host],
    state: RunState,
    bundle_sha: str,
    state_dir: Path,
    root: Path | None = None,
) -> Plan:
    """Plan ``selected`` phases (catalog order) on ``hosts``; never connects anywhere. ``root``:
    the checkout whose ``kernels/`` local hosts run in (default: :func:`~orchestrator.paths.project_root`)."""
    selected = sorted(selected, key=lambda lp: lp.spec.order)
    ids = {lp.spec.id for lp in selected}
    names = [h.name for h in hosts]
    phases: list[PhasePlan] = []
    problems: list[str] = []
    cache: dict[str, dict[str, str | None]] = {}
    families: dict[str, str | None] = {}
    for h in hosts:
        families[h.name] = model_family(h, state)
        cache[h.name] = host_values(h, bundle_sha, state_dir, root, families[h.name])
    for lp in selected:
        pp_problems: list[str] = []
        steps: list[PlannedStep] = []
        rsteps: list[PlannedStep] = []
        for step in lp.spec.steps:
            try:
                steps.append(plan_step(step, lp, hosts, inventory, bundle_sha, state_dir, cache, root))
            except SpecError as exc:
                pp_problems.append(exc.message)
        for step in lp.spec.rollback_steps:
            try:
                rsteps.append(plan_step(step, lp, hosts, inventory, bundle_sha, state_dir, cache, root))
            except SpecError as exc:
                pp_problems.append(exc.message)
        problems += pp_problems
        actions = [host_action(lp, h, state, catalog, bundle_sha, ids) for h in hosts]
        if uses_family(lp.spec):
            actions = [
                family_refusal(lp, h)
                if families[h.name] is None and a.action != "refused"
                else a.model_copy(update={"model_family": families[h.name]})
                for h, a in zip(hosts, actions)
            ]
        phases.append(
            PhasePlan(
                id=lp.spec.id,
                name=lp.spec.name,
                label=lp.spec.label,
                title=lp.spec.title,
                spec_path=str(lp.path),
                spec_sha=lp.sha256,
                requires=lp.spec.requires,
                needs_approval=lp.spec.needs_approval,
                to_approve=lp.spec.needs_approval and any(a.action in ("run", "resume") for a in actions),
                undo=lp.spec.undo,
                digest=phase_digest(lp, bundle_sha, hosts, state, catalog),
                hosts=names,
                actions=actions,
                bundle=[ship_action(h, bundle_sha) for h in hosts if ships_bundle(h, lp.spec.needs_approval)],
                steps=steps,
                rollback_steps=rsteps,
                problems=pp_problems,
            )
        )
    digest, evidence = plan_digest(bundle_sha, hosts, selected, state, catalog)
    return Plan(
        digest=digest,
        bundle_sha=bundle_sha,
        inventory=str(inventory.path),
        hosts=names,
        phases=phases,
        evidence=evidence,
        problems=problems,
        values=cache,
        families={h: f or "auto (not derived yet)" for h, f in families.items()},
    )


def family_refusal(lp: LoadedPhase, host: Host) -> HostAction:
    """A phase whose steps depend on the model family, on an ``auto`` host phase 0 has not derived."""
    return HostAction(
        host=host.name,
        action="refused",
        detail=(
            f"phase {lp.spec.label} runs the kernel and route of {host.name}'s model family, and its "
            "model_family is auto: phase 0's facts derive it (the probe's resolution of the service's launch "
            f"arguments), not recorded yet; run `{paste_command('run', '0')}` first"
        ),
    )
