"""The orchestrator CLI as a real subprocess (``python -m orchestrator``), for end-to-end tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support.paths import REPO

#: Variables of the caller's environment that would point the CLI at someone else's state.
_CALLER_VARS = (
    "ORCHESTRATOR_STATE_DIR",
    "ORCHESTRATOR_INVENTORY",
    "ORCHESTRATOR_ROOT",
    "ORCHESTRATOR_PHASES_DIR",
    "ORCHESTRATOR_VERIFY_CONFIG",
    "ORCHESTRATOR_VERIFY_DISABLE",
)


def cli_env(checkout: Path, phases: Path) -> dict[str, str]:
    """This process's environment with the CLI pointed at ``checkout`` (its ``kernels/`` is the
    bundle) and ``phases``; the caller's own ORCHESTRATOR_* settings are dropped and this checkout's
    ``orchestrator`` package is importable."""
    env = {k: v for k, v in os.environ.items() if k not in _CALLER_VARS}
    env.update(
        ORCHESTRATOR_ROOT=str(checkout),
        ORCHESTRATOR_PHASES_DIR=str(phases),
        PYTHONPATH=str(REPO) + os.pathsep + env.get("PYTHONPATH", ""),
    )
    return env


def cli_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "orchestrator", *args]


def run_cli_json(argv: list[str], *, env: dict[str, str], cwd: Path, timeout: float) -> tuple[int, Any]:
    """Run ``argv`` (stdin closed) and return its exit code and the one JSON document it printed;
    AssertionError with the ends of stdout and stderr when stdout is not one JSON document."""
    p = subprocess.run(
        argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )
    try:
        return p.returncode, json.loads(p.stdout)
    except ValueError:
        raise AssertionError(
            f"not one JSON document (exit {p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}"
        ) from None


def popen_cli(argv: list[str], *, env: dict[str, str], cwd: Path, **kw: Any) -> subprocess.Popen:
    """Start ``argv`` without waiting (stdin closed, stdout and stderr piped as text), for tests that
    signal the CLI mid-run; ``kw`` goes to Popen (e.g. ``start_new_session=True``)."""
    return subprocess.Popen(
        argv,
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
        **kw,
    )


def host_results(doc: dict, phase: str = "0") -> dict[str, dict]:
    """``results.phases[<phase>].hosts`` of a ``run --json`` document (one record per host)."""
    [rec] = [p for p in doc["results"]["phases"] if str(p["id"]) == phase]
    return rec["hosts"]


def step_results(doc: dict, step: str) -> dict[str, dict]:
    """Per-host results of ``step`` in a ``run --json`` document of exactly one phase."""
    [rec] = doc["results"]["phases"]
    [s] = [s for s in rec["steps"] if s["id"] == step]
    return s["hosts"]
