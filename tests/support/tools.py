"""The host tools as the engine runs them: ``python -m <package>.<tool> ... --json`` in ``kernels/``
(the unpacked bundle's layout), printing one JSON document on stdout (the tool contract)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from tests.support.paths import KERNELS


def run_tool(module: str, *args: str, timeout: float = 120.0, env: dict[str, str] | None = None) -> tuple[int, Any]:
    """Run ``python -m module ARGS`` with cwd and PYTHONPATH ``kernels/``; its exit code and the one
    JSON document on stdout (AssertionError with the ends of stdout and stderr otherwise)."""
    base = dict(os.environ if env is None else env)
    base["PYTHONPATH"] = os.pathsep.join(filter(None, [str(KERNELS), base.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=KERNELS,
        env=base,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    try:
        return proc.returncode, json.loads(proc.stdout)
    except ValueError:
        raise AssertionError(
            f"{module}: not one JSON document (exit {proc.returncode}): "
            f"stdout={proc.stdout[-1000:]!r} stderr={proc.stderr[-1000:]!r}"
        ) from None
