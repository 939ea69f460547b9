"""Issue 10's transport scenarios against whichever ``orchestrator`` is first on PYTHONPATH: one line each.

Used for the before/after table of the fault suite (the suite itself is tests/faults/test_fault_*.py)::

    git archive <old commit> orchestrator | tar -x -C /tmp/old
    PYTHONPATH=/tmp/old .venv/bin/python tests/faults/compare_before_after.py /tmp/cmp-before
    .venv/bin/python tests/faults/compare_before_after.py /tmp/cmp-after

Starts a private 2-host sshd lab under DIR (stopped by PID at the end); the disk-full scenario mounts
a 512 KiB tmpfs and needs root. Old code may lack a feature: that line prints the exception instead.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.append(str(ROOT / "tests" / "faults"))
sys.path.append(str(ROOT))  # after PYTHONPATH: the orchestrator under test comes first

from faultkit import add_banner, pids_with  # noqa: E402

import orchestrator  # noqa: E402
from orchestrator.bundle import build_bundle, ship_bundle, verify_on_host  # noqa: E402
from orchestrator.transport.local import terminate_all  # noqa: E402
from orchestrator.transport.ssh import SSHTransport  # noqa: E402
from tests.support.sshd_lab import Lab, known_hosts_line, start_lab  # noqa: E402


def outcome(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - the point is to show what the old code raised
        return f"{type(exc).__name__}: {str(exc)[:160]}"


def main(tmp: Path) -> None:
    print("code:", orchestrator.__file__)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    lab: Lab = start_lab(tmp / "lab", 2)

    def host(name: str, **kw: Any) -> types.SimpleNamespace:
        h = lab.host(name)
        d: dict[str, Any] = dict(
            name=name,
            address=h.address,
            port=h.port,
            user="root",
            ssh_key=lab.client_key,
            known_hosts=lab.known_hosts,
            remote_root=str(tmp / f"r-{name}"),
            connect_timeout_s=5,
            command_timeout_s=60,
        )
        d.update(kw)
        return types.SimpleNamespace(**d)

    try:
        h1 = lab.host("h1")
        t = SSHTransport(host("h1"))
        log = tmp / "state" / "runs" / "R" / "h1" / "0-quick-probe.log"
        th = threading.Thread(
            target=lambda: t.run(["sh", "-c", 'sleep "$0"', "399.1"], timeout_s=300, log_path=log), daemon=True
        )
        th.start()
        for _ in range(100):
            if pids_with("sleep 399.1"):
                break
            time.sleep(0.05)
        terminate_all(1.0)
        print("1 interrupt: right after terminate_all, the remote step is alive:", bool(pids_with("sleep 399.1")))
        t.close()
        time.sleep(1.5)
        print("1 interrupt: 1.5 s after the connection closed, alive:", bool(pids_with("sleep 399.1")))
        for p in pids_with("sleep 399.1"):
            os.kill(p, 9)

        add_banner(lab, "h2", tmp)
        t2 = SSHTransport(host("h2"))
        print(
            "2 banner: stdout of echo =", repr(outcome(lambda: t2.run(["echo", '{"ok": true}'], timeout_s=10).stdout))
        )
        src = tmp / "src" / "kernels"
        src.mkdir(parents=True)
        (src / "__init__.py").write_text("")
        (src / "MANIFEST").write_text("*.py\n")
        b = build_bundle(src.parent, tmp / "b")
        shipped = outcome(lambda: ship_bundle(t2, b, host("h2")).model_dump(include={"found", "uploaded", "verified"}))
        print("2 banner: ship_bundle ->", shipped)
        print("2 banner: verify_on_host ->", repr(outcome(lambda: verify_on_host(t2, b, host("h2")))))
        t2.close()

        cfg = tmp / "ssh_config"
        cfg.write_text(f"Host gpu-node-17\n  HostName {h1.address}\n  Port {h1.port}\n")
        os.environ["ORCHESTRATOR_SSH_CONFIG"] = str(cfg)
        t3 = SSHTransport(host("h1", address="gpu-node-17", port=22))
        print("3 ssh_config alias -> ok:", outcome(lambda: t3.run(["true"], timeout_s=5).ok))
        t3.close()

        kh = tmp / "known_hosts"
        kh.write_text(known_hosts_line(h1.address, h1.port, h1.host_pubkey) + f"\n@revoked * {h1.host_pubkey}\n")
        t4 = SSHTransport(host("h1", known_hosts=str(kh)))
        print("4 @revoked ->", outcome(lambda: t4.run(["true"], timeout_s=5).ok))
        t4.close()
        kh.write_text(
            f"@cert-authority *.example.org {h1.host_pubkey}\n"
            + known_hosts_line(h1.address, h1.port, h1.host_pubkey)
            + "\n"
        )
        t5 = SSHTransport(host("h1", known_hosts=str(kh)))
        r5 = outcome(lambda: t5.run(["true"], timeout_s=5))
        print("4 @cert-authority ->", r5 if isinstance(r5, str) else (r5.ok, getattr(r5, "warnings", None)))
        t5.close()

        mnt = tmp / "small"
        mnt.mkdir()
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mnt)]).returncode != 0:
            print("5 disk full: skipped (cannot mount a tmpfs)")
            return
        try:
            big = tmp / "big"
            big.write_bytes(os.urandom(2 << 20))
            t6 = SSHTransport(host("h1", remote_root=str(mnt)))
            print("5 disk full put ->", outcome(lambda: t6.put(big, str(mnt / "bundles" / "big"))))
            print("5 disk full: files left:", sorted(p.name for p in (mnt / "bundles").iterdir()))
            t6.close()
        finally:
            subprocess.run(["umount", "-l", str(mnt)], check=False)
    finally:
        lab.stop()


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/orchestrator-compare"))
