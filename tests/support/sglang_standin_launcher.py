"""Restart command for the SGLang STAND-IN (tests only): what an inventory's ``restart`` runs.

``python tests/support/sglang_standin_launcher.py restart --root R --port P`` stops the previous stand-in of this
root and port (found by its pidfile, checked against /proc so a recycled pid is never
signalled), then starts a new one detached (own session, log in ``R/standin-P.log``) and
returns at once, like ``systemctl restart``. ``stop`` only stops it.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

#: The stand-in server this launcher starts (tests/support/sglang_standin_server.py).
STANDIN = Path(__file__).resolve().with_name("sglang_standin_server.py")


def pidfile(root: Path, port: int) -> Path:
    return root / f"standin-{port}.pid"


def _is_standin(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(part.endswith(STANDIN.name.encode()) for part in cmdline)


def stop(root: Path, port: int, grace_s: float = 5.0) -> bool:
    """Stop the recorded stand-in; True when one was running."""
    path = pidfile(root, port)
    try:
        pid = int(path.read_text().strip())
    except (FileNotFoundError, ValueError):
        return False
    if not _is_standin(pid):
        path.unlink(missing_ok=True)
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and _is_standin(pid):
        time.sleep(0.05)
    if _is_standin(pid):
        os.kill(pid, signal.SIGKILL)
        while _is_standin(pid):
            time.sleep(0.05)
    path.unlink(missing_ok=True)
    return True


def start(root: Path, port: int) -> int:
    log = open(root / f"standin-{port}.log", "ab")  # noqa: SIM115 (handed to the child)
    proc = subprocess.Popen(
        [sys.executable, str(STANDIN), "--root", str(root), "--port", str(port)],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=log,
        start_new_session=True,
        cwd=str(root),
    )
    log.close()
    tmp = pidfile(root, port).with_suffix(".pid.tmp")
    tmp.write_text(f"{proc.pid}\n")
    os.replace(tmp, pidfile(root, port))
    return proc.pid


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="restart/stop the SGLang stand-in (tests only)")
    p.add_argument("action", choices=("restart", "stop"))
    p.add_argument("--root", required=True, type=Path)
    p.add_argument("--port", required=True, type=int)
    args = p.parse_args(argv)
    if not args.root.is_dir():
        print(f"error: --root {args.root} is not a directory", file=sys.stderr)
        return 2
    was_running = stop(args.root, args.port)
    if args.action == "restart":
        pid = start(args.root, args.port)
        print(f"stand-in restarted (pid {pid}, previous {'stopped' if was_running else 'none'})")
    else:
        print("stand-in stopped" if was_running else "stand-in was not running")
    return 0


if __name__ == "__main__":
    sys.exit(main())
