"""Helpers for the integration tests (imported by name; never ``from conftest``).

:class:`Standin` drives one SGLang STAND-IN server (tests/integration/standin_sglang.py)
through its launcher; :func:`run_cutover` runs ``python -m cutover_agent`` as the engine does.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.paths import KERNELS  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_bundle(root: Path, sha: str) -> Path:
    """An unpacked bundle dir as the engine leaves it: the plugin package and .sha256."""
    d = root / "bundles" / sha
    (d / "sglang_verify_plugin").mkdir(parents=True, exist_ok=True)
    (d / "sglang_verify_plugin" / "__init__.py").write_text("")
    (d / ".sha256").write_text(sha + "\n")
    return d


@dataclass
class Standin:
    """A stand-in SGLang server on 127.0.0.1:port whose state lives under root."""

    root: Path
    port: int

    @property
    def health_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/health"

    @property
    def generate_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/generate"

    @property
    def restart_argv(self) -> list[str]:
        return [
            sys.executable,
            str(HERE / "standin_launcher.py"),
            "restart",
            "--root",
            str(self.root),
            "--port",
            str(self.port),
        ]

    @property
    def restart_json(self) -> str:
        return json.dumps(self.restart_argv)

    def control(self, **modes: Any) -> None:
        (self.root / "standin_control.json").write_text(json.dumps(modes))

    def restart(self) -> None:
        subprocess.run(self.restart_argv, check=True, capture_output=True, timeout=30)

    def stop(self) -> None:
        subprocess.run(
            [
                sys.executable,
                str(HERE / "standin_launcher.py"),
                "stop",
                "--root",
                str(self.root),
                "--port",
                str(self.port),
            ],
            check=False,
            capture_output=True,
            timeout=30,
        )

    def wait_up(self, timeout_s: float = 15.0) -> dict:
        import urllib.request

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.health_url, timeout=1) as r:
                    return json.loads(r.read())
            except OSError:
                time.sleep(0.1)
        raise AssertionError(f"stand-in on port {self.port} did not come up in {timeout_s}s")


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
