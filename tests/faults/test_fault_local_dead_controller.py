"""A controller killed with SIGKILL during a step on a ``connection: local`` host: the step's whole
process group dies with it (the wrapper's dead man's switch reads end-of-file on the pipe only the
controller held), its pid record goes, and the state tells the truth; the same command resumes.

The SSH equivalent is ``test_fault_interrupt.py::test_a_controller_killed_with_sigkill_*``. Every
check here looks at the host side: ``/proc`` (what still runs in the step's group) and the files
under the state dir. No sshd is needed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from faultkit import Project, pgid_of, session_id, wait_for

from tests.support.sshd_lab import is_live

#: The step: the first time, it starts a second process of its group (``sleep 318.1``), notes both
#: pids, and sleeps far longer than the test; once its marker exists it just passes (the resume).
STEP_CODE = """
import json, os, subprocess, sys, time
from pathlib import Path
d = Path(sys.argv[1])
d.mkdir(parents=True, exist_ok=True)
if not (d / "slept").exists():
    (d / "slept").write_text("")
    child = subprocess.Popen(["sleep", "318.1"])
    (d / "pids.tmp").write_text("%d %d" % (os.getpid(), child.pid))
    (d / "pids.tmp").rename(d / "pids")
    time.sleep(300)
print(json.dumps(dict(ok=True)))
"""


def long_local_phase(tmp: Path, probe_dir: Path) -> dict:
    """Phase 0 with one step running :data:`STEP_CODE` (a file: arguments may hold no newline)."""
    script = tmp / "long_step.py"
    script.write_text(STEP_CODE)
    return {
        "id": 0,
        "name": "quick",
        "order": 0,
        "title": "A long step on a local host",
        "steps": [
            {
                "id": "probe",
                "title": "Sleep in a process group of two",
                "runs_on": "each_host",
                "command": ["{python}", str(script), str(probe_dir)],
                "timeout_s": 600,
            }
        ],
    }


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes whose process group is ``pgid``."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            out.append(int(entry.name))
    return out


@pytest.mark.parametrize("target", ["controller", "controller's process group"])
def test_sigkill_of_the_controller_kills_the_local_step_group_and_status_says_interrupted(tmp_path, capsys, target):
    """``controller``: SIGKILL of its pid alone. ``controller's process group``: of every process in
    its group (a closed terminal, ``kill -9 -PGID``), which must not take the switch with it."""
    probe = tmp_path / "probe"
    proj = Project(tmp_path, long_local_phase(tmp_path, probe))
    inv = tmp_path / "inventory.yaml"
    inv.write_text(
        json.dumps({"hosts": [{"name": "box", "connection": "local", "remote_root": str(tmp_path / "remote")}]})
    )
    pid_file = proj.state / "jobs" / "box" / "0-quick-probe.pid"
    ctl = subprocess.Popen(
        proj.argv("run", "0", "--inventory", str(inv), "--json", "--yes"),
        env=proj.env,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a group of its own: killing it spares pytest
    )
    step_pid = child_pid = pgid = 0
    try:
        wait_for(lambda: (probe / "pids").exists() or ctl.poll() is not None, 60, "the step to start")
        assert ctl.poll() is None, ctl.communicate(timeout=30)
        step_pid, child_pid = (int(x) for x in (probe / "pids").read_text().split())
        pgid = pgid_of(step_pid)
        # the step leads its own session and group, apart from the controller's; both processes are in it
        assert pgid == step_pid == session_id(step_pid) and pgid_of(child_pid) == pgid
        assert pgid != pgid_of(ctl.pid) and session_id(ctl.pid) != pgid
        assert sorted(group_members(pgid)) == sorted([step_pid, child_pid])
        wait_for(pid_file.exists, 10, "the step's pid record")
        assert pid_file.read_text().startswith(f"pgid={pgid} run=")

        if target == "controller":
            os.kill(ctl.pid, signal.SIGKILL)
        else:
            os.killpg(pgid_of(ctl.pid), signal.SIGKILL)
        killed_at = time.monotonic()
        ctl.communicate(timeout=30)
        assert ctl.returncode == -signal.SIGKILL

        wait_for(lambda: not group_members(pgid), 10, f"process group {pgid} of the killed run's step to be empty")
        gone_after_s = time.monotonic() - killed_at
        assert not is_live(step_pid) and not is_live(child_pid)
        with capsys.disabled():
            print(f"\n[local dead man's switch] step group {pgid} empty {gone_after_s:.2f}s after the SIGKILL")
        assert gone_after_s < 5, f"the step's group took {gone_after_s:.1f}s to die"
        wait_for(lambda: not pid_file.exists(), 5, "the pid record removed by the switch")
    finally:
        if ctl.poll() is None:
            ctl.kill()
            ctl.communicate(timeout=30)
        if pgid:
            for p in group_members(pgid):  # only if the test failed: leave nothing behind
                os.kill(p, signal.SIGKILL)

    # the state: the step was running when its run died -> interrupted, with the run and pid named
    code, doc = proj.cli("status", "--json")
    assert code == 0, doc
    res = doc["results"]
    assert res["lock_held"] is False and res["stale_lock"].startswith(f"pid {ctl.pid} ")
    result = res["state"]["phases"]["0"]["steps"][0]["hosts"]["box"]
    assert result["status"] == "interrupted"
    run_id = res["state"]["last_run"]["run_id"]
    assert result["reason"] == f"interrupted: run {run_id} (pid {ctl.pid}) ended while this step was running"
    human = subprocess.run(proj.argv("status"), env=proj.env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert human.returncode == 0 and "interrupted" in human.stdout
    assert f"stale lock info from a run that is gone: pid {ctl.pid}" in human.stderr

    # the same command resumes: no earlier copy is found running, the step runs again and passes
    code, doc = proj.cli("run", "0", "--inventory", str(inv), "--json", "--yes")
    assert code == 0, doc
    assert doc["results"]["phases"][0]["status"] == "completed"
    assert not any("still running" in e.get("message", "") for e in doc.get("errors", []))
    assert proj.state_doc()["phases"]["0"]["steps"][0]["hosts"]["box"]["status"] == "completed"
