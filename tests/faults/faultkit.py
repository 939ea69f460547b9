"""Helpers of the fault suite: hosts for a lab, host-side process and file checks, sshd reconfiguration."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.sshd_lab import Lab, _cmdline, _is_live

REPO = Path(__file__).resolve().parents[2]


def host(lab: Lab, name: str, remote_root: Path, **overrides: Any) -> types.SimpleNamespace:
    """An inventory-like host for ``lab``'s ``name`` (the fields SSHTransport reads)."""
    h = lab.host(name)
    fields: dict[str, Any] = dict(
        name=h.name,
        address=h.address,
        port=h.port,
        user=lab.user,
        connection="ssh",
        ssh_key=lab.client_key,
        known_hosts=lab.known_hosts,
        remote_root=str(remote_root),
        python=sys.executable,
        proxy_jump=None,
        connect_timeout_s=10,
        command_timeout_s=60,
    )
    fields.update(overrides)
    return types.SimpleNamespace(**fields)


def pids_with(marker: str) -> list[int]:
    """Live processes whose command line contains ``marker`` (never this test process)."""
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit() and int(p.name) != os.getpid() and marker in _cmdline(int(p.name)):
            if _is_live(int(p.name)):
                out.append(int(p.name))
    return out


def wait_for(cond: Callable[[], Any], timeout_s: float = 20.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.05)


def session_id(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[3])


def pgid_of(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[2])


def reconfigure(lab: Lab, name: str, extra: list[str]) -> None:
    """Restart ``name``'s sshd with ``extra`` lines appended to its config."""
    h = lab.host(name)
    lab.kill_host(name)
    with open(h.config, "a") as fh:
        fh.write("\n".join(extra) + "\n")
    lab.start_host(h)


CONTROLLER_SCRIPT = r"""
import json, sys, types
from pathlib import Path
from orchestrator.transport.ssh import SSHTransport
spec = json.loads(sys.argv[1])
argv = spec.pop("argv"); log = Path(spec.pop("log"))
t = SSHTransport(types.SimpleNamespace(**spec))
print("ready", flush=True)
r = t.run(argv, timeout_s=600, log_path=log)
print(json.dumps(r.model_dump()), flush=True)
"""


def controller(h: types.SimpleNamespace, argv: list[str], log: Path) -> subprocess.Popen[str]:
    """Another controller process that runs ``argv`` on ``h`` over SSH (to kill or freeze it)."""
    spec = {k: v for k, v in vars(h).items()} | {"argv": argv, "log": str(log)}
    import json

    env = dict(os.environ, PYTHONPATH=f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    return subprocess.Popen(
        [sys.executable, "-c", CONTROLLER_SCRIPT, json.dumps(spec)],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
