"""``orchestrator status`` without Typer: the command a user runs most, started quickly.

Importing Typer (and building its command tree) is about a quarter of the cold start of
``orchestrator status``. :func:`run_status_fast` handles the plain forms of the command
(``status [--json] [--debug] [--state-dir DIR] [--phases-dir DIR]``, ``--opt=value`` too)
with the very same code as the Typer command (:func:`status_envelope`, which
``orchestrator.cli.status`` calls); anything else (``--help``, an unknown flag, a missing value)
and every error goes to the Typer CLI, which then reports it exactly as usual. So the output,
the JSON document and the exit code are the same either way (tests/core/test_cli_habits.py
compares both). Neither typer nor click is imported here.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orchestrator.envelope import Envelope


def _status(state_dir: Path | None, phases_dir: Path | None, *, render: bool) -> dict[str, Any]:
    """Load state, specs and lock info; render the table on stdout when ``render``; the results."""
    from orchestrator.paths import default_state_dir
    from orchestrator.specs import load_catalog
    from orchestrator.state import StateStore

    sd = state_dir or default_state_dir()
    store = StateStore(sd)
    state = store.load_for_display()
    catalog = load_catalog(phases_dir)
    held = store.lock_held()
    holder = store.lock_holder()
    stale = holder.describe() if holder is not None and not held else None
    results: dict[str, Any] = {
        "state_path": str(store.path),
        "lock_held": held,
        "lock_holder": holder,
        "stale_lock": stale,
        "phases_dir": str(catalog.directory),
        "phases": [
            {"id": lp.spec.id, "label": lp.spec.label, "steps": [s.id for s in lp.spec.steps]} for lp in catalog.phases
        ],
        "state": state,
    }
    if render:  # last: whatever can fail has been done before the first line is printed
        from orchestrator.statusview import err, render_status

        render_status(state, catalog, str(store.path))
        if held and holder is not None:
            err.print(f"a run is in progress: {holder.describe()}")
        if stale:
            err.print(f"Warning: stale lock info from a run that is gone: {stale} (the next run takes over)")
    return results


def status_envelope(state_dir: Path | None, phases_dir: Path | None, as_json: bool) -> Envelope:
    """The body of ``orchestrator status``: render the todo list (human) and return the envelope."""
    from orchestrator.envelope import Envelope

    results = _status(state_dir, phases_dir, render=not as_json)
    results["state"] = results["state"].model_dump(mode="json")
    return Envelope(command="status", ok=True, exit_code=0, results=results)


def parse_status_argv(args: Sequence[str]) -> tuple[Path | None, Path | None, bool] | None:
    """``(state_dir, phases_dir, as_json)`` for a plain ``status`` command line, else None.

    ``ORCHESTRATOR_JSON=1`` means ``--json``, as in ``orchestrator.cli.main``; the state and
    phases folders from the environment are left to their defaults (the same variables)."""
    if not args or args[0] != "status":
        return None
    values: dict[str, Path | None] = {"--state-dir": None, "--phases-dir": None}
    as_json = os.environ.get("ORCHESTRATOR_JSON") == "1"
    i = 1
    while i < len(args):
        a = args[i]
        if a in ("--json", "--debug"):
            as_json = as_json or a == "--json"
            i += 1
            continue
        opt, eq, v = a.partition("=")
        if opt not in values:
            return None  # --help, -h, an unknown flag, a stray argument: Typer answers it
        if not eq:
            if i + 1 >= len(args):
                return None
            v = args[i + 1]
            i += 1
        if not v or v.startswith("-"):
            return None
        values[opt] = Path(v)
        i += 1
    return values["--state-dir"], values["--phases-dir"], as_json


def run_status_fast(args: Sequence[str]) -> int | None:
    """Run a plain ``orchestrator status`` and return its exit code; None: let the Typer CLI run it.

    An error of any kind is left to the Typer CLI (it loads the same files again and reports the
    error in its one place, ``orchestrator.cli._guard``): :func:`status_envelope` does all that
    can fail before it prints its first line."""
    parsed = parse_status_argv(args)
    if parsed is None:
        return None
    state_dir, phases_dir, as_json = parsed
    try:
        if not as_json:  # the envelope is only printed with --json
            _status(state_dir, phases_dir, render=True)
            return 0
        env = status_envelope(state_dir, phases_dir, as_json)
    except KeyboardInterrupt:  # as orchestrator.cli._guard reports it
        if as_json:
            from orchestrator.envelope import Envelope
            from orchestrator.errors import Interrupted

            err = Interrupted("interrupted", hint="run the same command again to resume")
            sys.stdout.write(Envelope(command="status", ok=False, exit_code=130, errors=[err.to_dict()]).dumps() + "\n")
        else:
            sys.stderr.write("Interrupted.\n")
        return 130
    except Exception:  # noqa: BLE001 - reported by the Typer CLI, which runs the command again
        return None
    if as_json:
        sys.stdout.write(env.dumps() + "\n")
        sys.stdout.flush()
    return env.exit_code
