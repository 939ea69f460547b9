"""Helpers of the fault suite: hosts for a lab, host-side process and file checks, sshd reconfiguration."""

from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

from tests.support.paths import REPO
from tests.support.sshd_lab import Lab, cmdline, lab_host, pids_with  # noqa: F401  (pids_with: the fault tests import it from here)
from tests.support.waiting import wait_until


def host(lab: Lab, name: str, remote_root: Path, **overrides: Any) -> types.SimpleNamespace:
    """An inventory-like host for ``lab``'s ``name`` (the fields SSHTransport reads)."""
    return lab_host(lab, name, remote_root, **overrides)


wait_for = wait_until  # the fault tests' name for it


def programs_with(marker: str) -> list[int]:
    """Live processes whose command line starts with ``marker``: the program itself (``sleep 314.1``),
    not the wrapper shell that carries it as arguments (``/bin/sh -c <wrapper> ... -- sleep 314.1``)."""
    return [p for p in pids_with(marker) if cmdline(p).startswith(marker)]


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


BANNER = "Welcome to gpu-node-17"

#: What a careless ``~/.bashrc`` does for every ssh session: print a banner (stdout and stderr)
#: before the command runs, sftp included. Installed with sshd's ForceCommand so that this
#: machine's own ~/.bashrc is never touched.
BANNER_SHELL = f"""#!/bin/sh
echo "{BANNER}"
echo "Last login: Tue Dec  1 08:00:00 2026 from 10.0.0.1" >&2
if [ -z "$SSH_ORIGINAL_COMMAND" ]; then exec /bin/sh; fi
case "$SSH_ORIGINAL_COMMAND" in
  */sftp-server) exec "$SSH_ORIGINAL_COMMAND" ;;
esac
exec /bin/sh -c "$SSH_ORIGINAL_COMMAND"
"""


def add_banner(lab: Lab, name: str, tmp: Path) -> None:
    """Make ``name``'s sshd print :data:`BANNER` before every command, as a noisy ~/.bashrc would."""
    script = tmp / f"banner-shell-{name}"
    script.write_text(BANNER_SHELL)
    script.chmod(0o755)
    reconfigure(lab, name, [f"ForceCommand {script}"])


# ---------------------------------------------------------------------------- the CLI


def phase_doc(sleep_s: float = 0.0, timeout_s: float = 120) -> dict[str, Any]:
    """Phase 0 with one step on each host: notes its pid under ``{remote_root}/probe``, sleeps,
    then prints one JSON document whose ``marker`` must be the bundle sha (it runs in the bundle)."""
    code = (
        "import json,os,sys,time,pathlib; d=pathlib.Path(sys.argv[1]); d.mkdir(parents=True,exist_ok=True); "
        "(d/'.pid').write_text(str(os.getpid())); (d/'.pid').rename(d/'pid'); time.sleep(float(sys.argv[2])); "
        "print(json.dumps(dict(ok=True, marker=open('.sha256').read().strip())))"
    )
    return {
        "id": 0,
        "name": "quick",
        "order": 0,
        "title": "Quick remote probe",
        "failure_policy": {"mode": "continue", "max_failed_hosts": None},
        "steps": [
            {
                "id": "probe",
                "title": "Run in the bundle on the host",
                "runs_on": "each_host",
                "command": ["{python}", "-c", code, "{remote_root}/probe", str(sleep_s)],
                "timeout_s": timeout_s,
                "metrics": ["marker"],
                "gates": [{"metric": "marker", "op": "==", "value": "{bundle_sha}", "reason": "runs in the bundle"}],
            }
        ],
    }


class Project:
    """A state dir, a phases dir with :func:`phase_doc` and a tiny bundle root; the CLI to drive them."""

    def __init__(self, tmp: Path, phase: dict[str, Any]) -> None:
        import yaml

        from tests.support.cli import cli_env

        self.tmp = tmp
        self.state = tmp / "state"
        self.root = tmp / "src"
        (self.root / "kernels").mkdir(parents=True)
        (self.root / "kernels" / "__init__.py").write_text("")
        (self.root / "kernels" / "MANIFEST").write_text("*.py\n")
        self.phases = tmp / "phases"
        self.phases.mkdir()
        (self.phases / "0-quick.yaml").write_text(yaml.safe_dump(phase, sort_keys=False))
        self.env = cli_env(self.root, self.phases)

    def argv(self, *args: str) -> list[str]:
        from tests.support.cli import cli_argv

        return cli_argv(*args, "--state-dir", str(self.state))

    def cli(self, *args: str, timeout: float = 240) -> tuple[int, Any]:
        from tests.support.cli import run_cli_json

        return run_cli_json(self.argv(*args), env=self.env, cwd=self.tmp, timeout=timeout)

    def popen(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            self.argv(*args),
            env=self.env,
            cwd=self.tmp,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            stdin=subprocess.DEVNULL,
        )

    def state_doc(self) -> Any:
        import json

        return json.loads((self.state / "state.json").read_text())
