"""The SGLang STAND-IN as tests drive it: a small HTTP server that answers where the cut-over
agent looks (``/health``, greedy ``/generate``), started and stopped through its launcher.

It is not SGLang: tests/support/sglang_standin_server.py is the server (failure modes from
``<root>/standin_control.json``), tests/support/sglang_standin_launcher.py is what an
inventory's ``service.restart`` runs (``restart_argv``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.net import wait_healthy

#: ``python LAUNCHER restart|stop --root R --port P``: (re)starts the stand-in detached, or stops it.
LAUNCHER = Path(__file__).resolve().with_name("sglang_standin_launcher.py")
#: The control file the stand-in reads at start and on every request (failure modes).
CONTROL_NAME = "standin_control.json"


def launcher_argv(action: str, root: Path, port: int) -> list[str]:
    """The launcher command for ``action`` (``restart`` or ``stop``) of the stand-in at ``root``/``port``."""
    return [sys.executable, str(LAUNCHER), action, "--root", str(root), "--port", str(port)]


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
        return launcher_argv("restart", self.root, self.port)

    @property
    def restart_json(self) -> str:
        return json.dumps(self.restart_argv)

    def control(self, **modes: Any) -> None:
        """Write the failure modes (``fail_health="bundled"``, ...) the stand-in reads on every request."""
        (self.root / CONTROL_NAME).write_text(json.dumps(modes))

    def restart(self) -> None:
        subprocess.run(self.restart_argv, check=True, capture_output=True, timeout=30)

    def stop(self) -> None:
        subprocess.run(launcher_argv("stop", self.root, self.port), check=False, capture_output=True, timeout=30)

    def wait_up(self, timeout_s: float = 15.0) -> dict:
        """The ``/health`` document once the stand-in answers 200."""
        return wait_healthy(self.health_url, timeout_s)
