"""Helpers of the SSH tests (imported by name, so they do not depend on which ``conftest``
module pytest loaded last): lab hosts as inventory-like objects, a silent TCP server, a tiny
bundle, and for the CLI scenarios a quick remote phase (``quick_phase``) and a ``Project``
(state dir, phases dir, bundle root, the CLI). The sshd lab itself is tests/support/sshd_lab.py.
"""

from __future__ import annotations

import socket
import subprocess
import threading
import types
from pathlib import Path

import yaml

from tests.support.bundles import make_bundle
from tests.support.cli import cli_argv, cli_env, popen_cli, run_cli_json
from tests.support.paths import REPO, copy_kernels
from tests.support.sshd_lab import Lab, lab_host


def make_host(lab: Lab, name: str, remote_base: Path, **overrides) -> types.SimpleNamespace:
    """A lab host whose remote_root is ``remote_base/"remote <name>"`` (a space on purpose) unless overridden."""
    overrides.setdefault("remote_root", remote_base / f"remote {name}")
    return lab_host(lab, name, **overrides)


class SilentServer:
    """Accepts TCP connections and never says a word (a wedged sshd)."""

    def __init__(self, address: str = "127.0.0.250") -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((address, 0))
        self.sock.listen(16)
        self.address, self.port = self.sock.getsockname()
        self.accepted: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        self.sock.settimeout(0.1)
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted.append(conn)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        for c in self.accepted:
            c.close()
        self.sock.close()


# ------------------------------------------------- the CLI against lab hosts (tests/ssh scenarios)

#: A step that proves where it ran: it reads the bundle's ``.sha256`` marker from its cwd,
#: notes that it started (under ``{remote_root}/probe``), sleeps, and prints one JSON document.
PROBE = (
    "import json,os,sys,time,pathlib; d=pathlib.Path(sys.argv[1]); d.mkdir(parents=True,exist_ok=True); "
    "t=d/'.started'; t.write_text(str(os.getpid())); t.rename(d/'started'); time.sleep(float(sys.argv[2])); "
    "print(json.dumps(dict(ok=True, marker=open('.sha256').read().strip(), "
    "has_kernels=os.path.isfile('MANIFEST'), cwd=os.getcwd())))"
)


def quick_phase(sleep_s: float = 0.0, policy: dict | None = None, timeout_s: float = 60) -> dict:
    return {
        "id": 0,
        "name": "quick",
        "order": 0,
        "title": "Quick remote probe",
        "failure_policy": policy or {"mode": "continue", "max_failed_hosts": None},
        "steps": [
            {
                "id": "probe",
                "title": "Read the bundle marker on the host",
                "runs_on": "each_host",
                "command": ["{python}", "-c", PROBE, "{remote_root}/probe", str(sleep_s)],
                "timeout_s": timeout_s,
                "metrics": ["marker", "has_kernels"],
                "gates": [
                    {
                        "metric": "marker",
                        "op": "==",
                        "value": "{bundle_sha}",
                        "reason": "the step must run in the verified bundle directory",
                    },
                    {
                        "metric": "has_kernels",
                        "op": "==",
                        "value": True,
                        "reason": "the cwd is the unpacked bundle (it holds the MANIFEST)",
                    },
                ],
            }
        ],
    }


class Project:
    """A state dir, a phases dir and a bundle root for one scenario, and the CLI to drive them."""

    def __init__(self, tmp: Path, phase: dict | None) -> None:
        self.tmp = tmp
        self.state = tmp / "state"
        if phase is None:  # the real phases and a frozen copy of this checkout's kernels/
            self.root = tmp / "checkout"
            copy_kernels(self.root)
            self.phases = REPO / "phases"
        else:
            make_bundle(tmp, "scenario")  # writes a tiny kernels/ under tmp/src-scenario
            self.root = tmp / "src-scenario"
            self.phases = tmp / "phases"
            self.phases.mkdir()
            (self.phases / "0-quick.yaml").write_text(yaml.safe_dump(phase, sort_keys=False))

    def env(self) -> dict[str, str]:
        return cli_env(self.root, self.phases)

    def argv(self, *args: str, state: bool = True) -> list[str]:
        return cli_argv(*args, *(["--state-dir", str(self.state)] if state else []))

    def cli(self, *args: str, timeout: float = 240, state: bool = True) -> tuple[int, dict]:
        return run_cli_json(self.argv(*args, state=state), env=self.env(), cwd=self.tmp, timeout=timeout)

    def popen(self, *args: str) -> subprocess.Popen:
        return popen_cli(self.argv(*args), env=self.env(), cwd=self.tmp)
