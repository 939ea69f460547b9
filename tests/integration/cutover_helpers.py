"""Helpers for the cut-over tests (imported by name; never ``from conftest``).

:func:`make_bundle` lays out an unpacked bundle as the engine leaves it; :func:`run_cutover`
runs ``python -m cutover_agent`` as the engine does. The SGLang stand-in they run against is
tests/support/sglang_standin.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.paths import KERNELS


def make_bundle(root: Path, sha: str) -> Path:
    """An unpacked bundle dir as the engine leaves it: the plugin package and .sha256."""
    d = root / "bundles" / sha
    (d / "sglang_verify_plugin").mkdir(parents=True, exist_ok=True)
    (d / "sglang_verify_plugin" / "__init__.py").write_text("")
    (d / ".sha256").write_text(sha + "\n")
    return d


def run_cutover(*args: str, timeout: float = 120.0) -> tuple[int, dict]:
    """Run ``python -m cutover_agent ARGS --json`` as the engine would; (exit code, document)."""
    proc = subprocess.run(
        [sys.executable, "-m", "cutover_agent", *args, "--json"],
        cwd=KERNELS,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1, f"expected one JSON line, got stdout={proc.stdout!r} stderr={proc.stderr[-500:]!r}"
    return proc.returncode, json.loads(lines[0])
