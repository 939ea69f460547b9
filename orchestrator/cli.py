"""The ``orchestrator`` command line: a thin Typer layer over :mod:`orchestrator.engine`.

Every command funnels errors through :func:`_guard`: an expected :class:`OrchestratorError` is one
line on stderr (or the JSON envelope on stdout with ``--json``) and its exit code; anything else
is "internal error (bug)" with exit 1, the traceback only with ``--debug``/``ORCHESTRATOR_DEBUG=1``.
Heavy modules (rich views, engine) are imported inside the commands that need them.
"""

from __future__ import annotations

import os
import signal
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from orchestrator.envelope import Envelope
from orchestrator.errors import ExitCode, InternalError, Interrupted, OrchestratorError, UsageError

if TYPE_CHECKING:  # heavy modules are imported by the commands that need them
    from orchestrator.approval import Approver
    from orchestrator.engine import Engine
    from orchestrator.inventory import Inventory
    from orchestrator.planner import Plan
    from orchestrator.specs import PhaseCatalog

app = typer.Typer(
    name="orchestrator",
    help="Phase-gated deployment of the MLA verify-attention kernel into SGLang (phases 0-4).",
    no_args_is_help=True,
    add_completion=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)
inventory_app = typer.Typer(help="Inventory commands.", no_args_is_help=True)
app.add_typer(inventory_app, name="inventory")

StateDirOpt = Annotated[
    Path | None,
    typer.Option("--state-dir", envvar="ORCHESTRATOR_STATE_DIR", help="State folder (default .orchestrator/)."),
]
InventoryOpt = Annotated[
    Path | None,
    typer.Option(
        "--inventory", "-i", envvar="ORCHESTRATOR_INVENTORY", help="Inventory YAML (default inventory/local.yaml)."
    ),
]
PhasesDirOpt = Annotated[
    Path | None,
    typer.Option("--phases-dir", envvar="ORCHESTRATOR_PHASES_DIR", help="Folder of phase specs (default phases/)."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print exactly one JSON document on stdout; never prompt.")]
DebugOpt = Annotated[bool, typer.Option("--debug", envvar="ORCHESTRATOR_DEBUG", help="Show tracebacks.")]
LimitOpt = Annotated[str | None, typer.Option("--limit", "-l", help="Comma-separated host or group names.")]
PhasesArg = Annotated[list[str] | None, typer.Argument(help="Phase ids (0-4) or names.", show_default=False)]
AllOpt = Annotated[bool, typer.Option("--all", help="All phases in order.")]
ApproveOpt = Annotated[
    str | None, typer.Option("--approve", metavar="DIGEST", help="Approve the plan with this digest (no TTY / --json).")
]
InteractiveOpt = Annotated[
    bool | None,
    typer.Option("--interactive/--no-interactive", help="Prompt for approval on stdin (default: only on a TTY)."),
]


def _cmdline() -> str:
    return " ".join(["orchestrator"] + sys.argv[1:])[:500]


def _emit_json(env: Envelope) -> None:
    sys.stdout.write(env.dumps() + "\n")
    sys.stdout.flush()


def _guard(command: str, as_json: bool, debug: bool, fn: Callable[[], Envelope]) -> None:
    """Run ``fn``; render its envelope (JSON) or nothing (human views print themselves); exit with its code."""
    try:
        env = fn()
    except OrchestratorError as exc:
        env = Envelope(command=command, ok=False, exit_code=int(exc.exit_code), errors=[exc.to_dict()], plan=exc.plan)
        if debug:
            traceback.print_exc()
        if as_json:
            _emit_json(env)
        else:
            from orchestrator.views import error_line

            error_line(str(exc), exc.hint)
        raise typer.Exit(int(exc.exit_code)) from None
    except KeyboardInterrupt:
        err = Interrupted("interrupted", hint="run the same command again to resume")
        if as_json:
            _emit_json(Envelope(command=command, ok=False, exit_code=130, errors=[err.to_dict()]))
        else:
            sys.stderr.write("Interrupted.\n")
        raise typer.Exit(130) from None
    except typer.Exit:
        raise
    except Exception as exc:  # noqa: BLE001 - the one place that turns bugs into a clean exit
        bug = InternalError(f"internal error (bug): {type(exc).__name__}: {exc}", hint="rerun with --debug")
        msg = bug.message
        if debug:
            traceback.print_exc()
        if as_json:
            _emit_json(Envelope(command=command, ok=False, exit_code=1, errors=[bug.to_dict()]))
        else:
            sys.stderr.write(f"Error: {msg}\nhint: rerun with --debug for the traceback\n")
        raise typer.Exit(1) from None
    if as_json:
        _emit_json(env)
    if env.exit_code:
        raise typer.Exit(env.exit_code)


def _context(
    state_dir: Path | None, inventory: Path | None, phases_dir: Path | None
) -> tuple[PhaseCatalog, Inventory, Path]:
    from orchestrator.inventory import load_inventory
    from orchestrator.paths import default_inventory, default_state_dir
    from orchestrator.specs import load_catalog

    catalog = load_catalog(phases_dir)
    inv = load_inventory(inventory or default_inventory())
    return catalog, inv, state_dir or default_state_dir()


def _engine(state_dir: Path | None, inventory: Path | None, phases_dir: Path | None, as_json: bool) -> Engine:
    from orchestrator.engine import Engine

    catalog, inv, sd = _context(state_dir, inventory, phases_dir)
    if as_json:  # --json: no progress lines (NullProgress), one document at the end
        return Engine(catalog=catalog, inventory=inv, state_dir=sd)
    from orchestrator.views import human_progress, on_event

    return Engine(catalog=catalog, inventory=inv, state_dir=sd, notify=on_event, progress=human_progress())


def _approver(as_json: bool, interactive: bool | None) -> Approver:
    from orchestrator.approval import NonInteractive

    if as_json:
        if interactive:
            raise UsageError("--json never prompts: use --approve DIGEST instead of --interactive")
        return NonInteractive()
    if interactive is None:
        interactive = sys.stdin.isatty() and sys.stderr.isatty()
    if interactive:
        from orchestrator.views import InteractiveApprover

        return InteractiveApprover()
    return NonInteractive()


def _plan_envelope(command: str, plan: Plan, as_json: bool) -> Envelope:
    """The envelope of ``plan`` / ``run --dry-run``: exit 3 when the plan has problems."""
    errors = plan.problem_errors()
    if errors and not as_json:
        from orchestrator.views import error_line

        error_line(plan.problems[0], f"{len(plan.problems)} problem(s); fix the inventory or phase spec")
    code = int(ExitCode.INVALID_SPEC) if errors else 0
    return Envelope(command=command, ok=not errors, exit_code=code, dry_run=True, plan=plan, errors=errors)


# ---------------------------------------------------------------------------------------- status
@app.command()
def status(
    state_dir: StateDirOpt = None, phases_dir: PhasesDirOpt = None, as_json: JsonOpt = False, debug: DebugOpt = False
) -> None:
    """Show the persisted todo list: every phase and step, per-host results and gate evidence."""

    def go() -> Envelope:
        from orchestrator.fastpath import status_envelope  # shared with the Typer-free `python -m` path

        return status_envelope(state_dir, phases_dir, as_json)

    _guard("status", as_json, debug, go)


# ---------------------------------------------------------------------------------------- run/plan
@app.command()
def run(
    phases: PhasesArg = None,
    all_phases: AllOpt = False,
    inventory: InventoryOpt = None,
    limit: LimitOpt = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Connect to nothing; print every command and the digest.")
    ] = False,
    as_json: JsonOpt = False,
    yes: Annotated[
        bool,
        typer.Option(
            "--yes",
            "-y",
            help="Skip non-critical confirmations (re-running a passed "
            "phase). Never approves a step that changes a live service.",
        ),
    ] = False,
    approve: ApproveOpt = None,
    forks: Annotated[int, typer.Option("--forks", min=1, max=256, help="Hosts in parallel.")] = 10,
    interactive: InteractiveOpt = None,
    state_dir: StateDirOpt = None,
    phases_dir: PhasesDirOpt = None,
    debug: DebugOpt = False,
) -> None:
    """Run phases (id or name) on the inventory's hosts, in order, with gates and approval."""

    def go() -> Envelope:
        eng = _engine(state_dir, inventory, phases_dir, as_json)
        if dry_run:
            plan = eng.plan(phases or [], all_phases=all_phases, limit=limit)
            if not as_json:
                from orchestrator.views import render_plan

                render_plan(plan, title="Dry run (nothing is executed)", show_actions=False)
            return _plan_envelope("run", plan, as_json)
        from orchestrator.engine import RunOptions

        opts = RunOptions(forks=forks, approve=approve, rerun=yes, command=_cmdline())
        report = eng.run(
            phases or [], all_phases=all_phases, limit=limit, options=opts, approver=_approver(as_json, interactive)
        )
        if not as_json:
            from orchestrator.views import error_line, render_report

            render_report(report)
            if report.errors:
                e = report.errors[0]
                error_line(f"phase {e['phase']} {e['code'].lower()} on {e['host']}: {e['message']}", e["hint"])
        return Envelope(
            command="run",
            ok=report.exit_code == 0,
            exit_code=report.exit_code,
            run_id=report.run_id,
            plan=report.plan,
            results={"phases": report.phases, "skipped_phases": report.skipped_phases},
            errors=report.errors,
            warnings=report.warnings,
        )

    _guard("run", as_json, debug, go)


@app.command()
def plan(
    phases: PhasesArg = None,
    all_phases: AllOpt = False,
    inventory: InventoryOpt = None,
    limit: LimitOpt = None,
    as_json: JsonOpt = False,
    state_dir: StateDirOpt = None,
    phases_dir: PhasesDirOpt = None,
    debug: DebugOpt = False,
) -> None:
    """Show what `run` would do per host (run / resume / up to date / refused), every command, and the digest."""

    def go() -> Envelope:
        eng = _engine(state_dir, inventory, phases_dir, as_json)
        p = eng.plan(phases or [], all_phases=all_phases, limit=limit)
        eng.record_planned(p, _cmdline())
        if not as_json:
            from orchestrator.views import render_plan

            render_plan(p, title="Plan", show_actions=True)
            if p.needs_approval:
                from orchestrator.invocation import paste_command
                from orchestrator.views import out

                again = paste_command("run", *(phases or ["--all"]), "--approve", p.digest)
                out.print(f"To run exactly this plan without a TTY: {again}", soft_wrap=True)  # pasteable
        return _plan_envelope("plan", p, as_json)

    _guard("plan", as_json, debug, go)


@app.command()
def rollback(
    phases: PhasesArg = None,
    inventory: InventoryOpt = None,
    limit: LimitOpt = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show the rollback commands and digest only.")] = False,
    as_json: JsonOpt = False,
    approve: ApproveOpt = None,
    forks: Annotated[int, typer.Option("--forks", min=1, max=256)] = 10,
    interactive: InteractiveOpt = None,
    state_dir: StateDirOpt = None,
    phases_dir: PhasesDirOpt = None,
    debug: DebugOpt = False,
) -> None:
    """Run the declared rollback steps of phases (default: every phase that has them) after approval."""

    def go() -> Envelope:
        eng = _engine(state_dir, inventory, phases_dir, as_json)
        selected, p, digest = eng.rollback_plan(phases or [], limit=limit)
        if dry_run:
            if not as_json:
                from orchestrator.views import out

                for ph in p.phases:
                    for s in ph.rollback_steps:
                        out.print(f"rollback {ph.label} {s.id}: {s.title}")
                        for c in s.commands:
                            out.print(f"    [{c.host}] {c.display}")
                out.print(f"Rollback digest: {digest}")
            eng.record_planned_rollback(selected, p, digest, _cmdline())
            pd = p.model_dump(mode="json")
            pd["rollback_digest"] = digest
            return Envelope(command="rollback", ok=True, exit_code=0, dry_run=True, plan=pd)
        from orchestrator.engine import RunOptions

        report = eng.rollback(
            phases or [],
            limit=limit,
            options=RunOptions(forks=forks, approve=approve, command=_cmdline()),
            approver=_approver(as_json, interactive),
        )
        if not as_json:
            from orchestrator.views import render_report

            render_report(report)
        return Envelope(
            command="rollback",
            ok=report.exit_code == 0,
            exit_code=report.exit_code,
            run_id=report.run_id,
            results={"phases": [r.model_dump(mode="json") for r in report.phases]},
            errors=report.errors,
            warnings=report.warnings,
        )

    _guard("rollback", as_json, debug, go)


# ---------------------------------------------------------------------------------------- phases
@app.command()
def phases(
    phase: Annotated[str | None, typer.Argument(help="Show one phase (id or name).")] = None,
    as_json: JsonOpt = False,
    phases_dir: PhasesDirOpt = None,
    debug: DebugOpt = False,
) -> None:
    """List the phase specs, or show one with its steps, gates and rollback steps."""

    def go() -> Envelope:
        from orchestrator.specs import load_catalog

        catalog = load_catalog(phases_dir)
        chosen = [catalog.resolve(phase)] if phase else catalog.phases
        docs = [{"path": str(lp.path), "sha256": lp.sha256, **lp.spec.model_dump(mode="json")} for lp in chosen]
        if not as_json:
            from orchestrator.views import out

            for lp in chosen:
                s = lp.spec
                req = f" (requires {s.requires})" if s.requires is not None else ""
                appr = " [approval]" if s.needs_approval else ""
                out.print(f"{s.label}: {s.title}{req}{appr}  ({lp.path})")
                if phase:
                    for st in list(s.steps) + list(s.rollback_steps):
                        kind = "rollback" if st in s.rollback_steps else st.runs_on.value
                        cmd = " ".join(st.command) if st.command else f"<builtin:{st.builtin}>"
                        out.print(
                            f"  - {st.id} [{kind}, {st.priority.value}, {st.timeout_s:g}s]"
                            f"{' [approval]' if st.requires_approval else ''}: {st.title}"
                        )
                        out.print(f"      $ {cmd}")
                        for g in st.gates:
                            out.print(f"      gate {g.describe()}  ({g.reason})")
                        for family in st.by_model_family:  # what hosts of that family run instead
                            fst = st.for_family(family)
                            fcmd = " ".join(fst.command) if fst.command else f"<builtin:{fst.builtin}>"
                            out.print(f"    on model_family {family} [{fst.timeout_s:g}s]: {fst.title}")
                            out.print(f"      $ {fcmd}")
                            for g in fst.gates:
                                out.print(f"      gate {g.describe()}  ({g.reason})")
        return Envelope(command="phases", ok=True, exit_code=0, results={"phases": docs})

    _guard("phases", as_json, debug, go)


# ---------------------------------------------------------------------------------------- inventory
@inventory_app.command("check")
def inventory_check(
    inventory: InventoryOpt = None,
    limit: LimitOpt = None,
    with_facts: Annotated[
        bool,
        typer.Option(
            "--facts", help="Also connect and collect toolchain facts (nvcc, GPU, driver, torch, sglang); read-only."
        ),
    ] = False,
    forks: Annotated[int, typer.Option("--forks", min=1, max=256)] = 10,
    as_json: JsonOpt = False,
    debug: DebugOpt = False,
) -> None:
    """Validate an inventory file and show the resolved hosts (defaults applied, groups, canary);
    with --facts also each host's toolchain facts (exit 4 if a host cannot be reached)."""

    def go() -> Envelope:
        from orchestrator.inventory import load_inventory
        from orchestrator.paths import default_inventory

        inv = load_inventory(inventory or default_inventory())
        hosts = inv.select(limit)
        canary = inv.canary(hosts).name if hosts else None
        if not as_json:
            from rich.table import Table

            from orchestrator.views import out

            t = Table(title=f"{inv.path}: {len(hosts)} hosts, canary {canary}")
            for col in ("name", "connection", "address", "user", "arch", "remote_root", "groups", "service"):
                t.add_column(col.upper(), overflow="fold")
            for h in hosts:
                svc = "restart+health" if h.service.restart and h.service.health_url else "-"
                t.add_row(
                    h.name,
                    h.connection,
                    f"{h.address}:{h.port}" if not h.is_local else h.address,
                    h.user or "-",
                    h.arch,
                    h.remote_root,
                    ",".join(h.groups) or "-",
                    svc,
                )
            out.print(t)
        found: dict[str, Any] | None = None
        code = 0
        if with_facts:
            from orchestrator.facts import facts_errors, gather
            from orchestrator.transport.factory import make_transport

            found = gather(hosts, make_transport, forks=forks)
            if any(f.get("unreachable") for f in found.values()):
                code = int(ExitCode.UNREACHABLE)
            elif any(not f.get("ok") for f in found.values()):
                code = int(ExitCode.FAILED)
            if not as_json:
                from orchestrator.views import render_facts

                render_facts(found)
        return Envelope(
            command="inventory check",
            ok=code == 0,
            exit_code=code,
            errors=facts_errors(found, code) if found else [],
            results={
                "path": str(inv.path),
                "canary": canary,
                "groups": inv.groups(),
                "hosts": [h.model_dump(mode="json") for h in hosts],
                "facts": found,
            },
        )

    _guard("inventory check", as_json, debug, go)


def _print_version(value: bool) -> None:
    if value:  # eager: `orchestrator --version` alone works (exit 0), before any command is required
        from orchestrator import __version__

        typer.echo(__version__)
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", help="Print the version.", is_eager=True, callback=_print_version)
    ] = False,
) -> None:
    pass


def _sigterm(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point. SIGTERM is treated like Ctrl-C (state records ``interrupted``, exit 130).

    With ``--json`` (or ``ORCHESTRATOR_JSON=1``) even a usage error found before any command runs
    (exit 2) is reported as the one JSON document on stdout.
    """
    try:
        signal.signal(signal.SIGTERM, _sigterm)
    except ValueError:  # not the main thread (embedded use)
        pass
    args = list(sys.argv[1:] if argv is None else argv)
    from orchestrator.invocation import remember_argv

    remember_argv(args)  # printed commands (hints) carry -i/--state-dir/--phases-dir/--limit
    if os.environ.get("ORCHESTRATOR_JSON") == "1" and "--json" not in args:
        args.append("--json")
    if "--json" not in args:
        app(args=args, prog_name="orchestrator")
        return
    command = args[0] if args and not args[0].startswith("-") else "orchestrator"
    if command == "inventory" and len(args) > 1 and not args[1].startswith("-"):
        command += " " + args[1]
    try:
        rc = app(args=args, prog_name="orchestrator", standalone_mode=False)
    except typer.TyperException as exc:  # click usage errors: bad flag, bad value, missing argument
        code = int(getattr(exc, "exit_code", ExitCode.USAGE))
        msg = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        usage = UsageError(msg, hint=f"orchestrator {command} --help").to_dict()
        usage["exit_code"] = code
        _emit_json(Envelope(command=command, ok=False, exit_code=code, errors=[usage]))
        sys.exit(code)
    except typer.Abort:
        _emit_json(Envelope(command=command, ok=False, exit_code=130, errors=[Interrupted("aborted").to_dict()]))
        sys.exit(130)
    sys.exit(rc if isinstance(rc, int) else 0)
