"""Interrupts and dead controllers: the remote process group dies with the run, and a resume can see
an earlier copy of a step that is still running (issue 10). Every test checks the host side."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest
from faultkit import controller, host, pgid_of, pids_with, programs_with, session_id, wait_for

from orchestrator.transport.base import Transport
from orchestrator.transport.local import LocalTransport, terminate_all
from orchestrator.transport.ssh import SSHTransport, inflight

pytestmark = pytest.mark.ssh

#: A step that forks: a background child and a foreground one, both in the step's process group.
FORKING = ["sh", "-c", 'sleep "$0" & sleep "$1"; wait', "311.1", "311.2"]


def _log(tmp: Path, host_name: str, job: str = "0-quick-probe") -> Path:
    return tmp / "state" / "runs" / "20261201T000000Z-abc123" / host_name / f"{job}.log"


def test_terminate_all_kills_the_remote_groups_on_every_host_before_it_returns(fault_lab, tmp_path, closing):
    lab = fault_lab(2)
    ts = {n: closing(SSHTransport(host(lab, n, tmp_path / n))) for n in ("h1", "h2")}
    results: dict[str, object] = {}
    markers = {"h1": ["311.11", "311.12"], "h2": ["311.21", "311.22"]}

    def work(n: str) -> None:
        argv = ["sh", "-c", 'sleep "$0" & sleep "$1"; wait', *markers[n]]
        results[n] = ts[n].run(argv, timeout_s=300, log_path=_log(tmp_path, n))

    threads = [threading.Thread(target=work, args=(n,)) for n in ts]
    for th in threads:
        th.start()
    for n, (a, b) in markers.items():
        wait_for(lambda a=a, b=b: pids_with(f"sleep {a}") and pids_with(f"sleep {b}"), what=f"{n} step started")
    pid_files = {n: tmp_path / n / "jobs" / "0-quick-probe.pid" for n in ts}
    for n, pf in pid_files.items():
        leader = int(pf.read_text().split()[0].split("=")[1])
        [child] = pids_with(f"sleep {markers[n][1]}")
        assert pgid_of(child) == leader and session_id(child) == leader, "the step runs in its own group/session"
    assert len(inflight()) == 2

    started = time.monotonic()
    assert terminate_all(1.0) >= 2  # the one call execution.py/engine.py make on SIGINT/SIGTERM
    took = time.monotonic() - started
    # host side, right when terminate_all returned (before the engine records `interrupted`)
    for n, (a, b) in markers.items():
        assert pids_with(f"sleep {a}") == [] and pids_with(f"sleep {b}") == [], f"{n}: a step process survived"
        assert not pid_files[n].exists(), f"{n}: the pid file was left behind"
    assert took < 10, took
    for th in threads:
        th.join(15)
    assert all(not r.ok for r in results.values()), results  # type: ignore[attr-defined]


def test_a_controller_killed_with_sigkill_leaves_no_process_on_the_host(fault_lab, tmp_path):
    """Nothing in the controller runs after SIGKILL: the host-side dead man's switch (stdin EOF when
    the connection drops) kills the step's group."""
    lab = fault_lab(1)
    h = host(lab, "h1", tmp_path / "r")
    ctl = controller(h, ["sh", "-c", 'sleep "$0" & sleep "$1"; wait', "312.1", "312.2"], _log(tmp_path, "h1"))
    try:
        wait_for(lambda: pids_with("sleep 312.1") and pids_with("sleep 312.2"), what="step started")
        ctl.kill()
        ctl.wait(10)
        wait_for(lambda: not pids_with("sleep 312.1") and not pids_with("sleep 312.2"), 15, "step killed on host")
        wait_for(lambda: not (tmp_path / "r" / "jobs" / "0-quick-probe.pid").exists(), 5, "pid file removed")
    finally:
        ctl.kill()
        for p in pids_with("sleep 312."):
            os.kill(p, signal.SIGKILL)


def test_running_job_names_the_host_and_pid_of_an_earlier_copy_still_running(fault_lab, tmp_path, closing):
    """A frozen controller (its connection still open, so no EOF reaches the host) leaves its step
    running; a second run's check finds it, names pid and host, and never starts a second copy."""
    lab = fault_lab(1)
    h = host(lab, "h1", tmp_path / "r")
    ctl = controller(h, ["sh", "-c", 'sleep "$0"', "313.1"], _log(tmp_path, "h1"))
    try:
        [sleeper] = wait_for(lambda: pids_with("sleep 313.1"), what="step started")
        os.kill(ctl.pid, signal.SIGSTOP)
        t = closing(SSHTransport(h))
        assert isinstance(t, Transport)
        job = wait_for(lambda: t.running_job("0-quick-probe"), what="the job record")
        assert job.pgid == session_id(sleeper) and job.host == "h1"
        assert job.run_id == "20261201T000000Z-abc123"
        msg = job.describe()
        assert f"h1: an earlier copy of 0-quick-probe is still running as pid {job.pgid}" in msg
        assert t.running_job("0-quick-probe") is not None, "asking again does not disturb it"
        assert pids_with("sleep 313.1") == [sleeper]
        assert t.running_job("1-parity-run") is None, "another step is not confused with it"
        os.kill(ctl.pid, signal.SIGKILL)  # the frozen controller dies: its connection closes
        os.kill(ctl.pid, signal.SIGCONT)
        ctl.wait(10)
        wait_for(lambda: not pids_with("sleep 313.1"), 15, "the orphaned step killed by the host-side switch")
        assert t.running_job("0-quick-probe") is None
        assert not (tmp_path / "r" / "jobs" / "0-quick-probe.pid").exists()
    finally:
        for sig in (signal.SIGKILL, signal.SIGCONT):
            try:
                os.kill(ctl.pid, sig)
            except ProcessLookupError:
                pass
        for p in pids_with("sleep 313.1"):
            os.kill(p, signal.SIGKILL)


def test_a_second_copy_of_a_step_is_refused_while_the_first_still_runs(fault_lab, tmp_path, closing):
    """The resume path: the same step started again while an earlier copy still runs on the host is
    refused (JobStillRunning, naming host and pid); nothing new starts; once it is gone the step runs."""
    from orchestrator.transport.base import JobStillRunning

    lab = fault_lab(1)
    h = host(lab, "h1", tmp_path / "r")
    ctl = controller(h, ["sh", "-c", 'sleep "$0"', "316.1"], _log(tmp_path, "h1"))
    canary = tmp_path / "second-copy-ran"
    try:
        [sleeper] = wait_for(lambda: pids_with("sleep 316.1"), what="first copy started")
        os.kill(ctl.pid, signal.SIGSTOP)  # its controller is frozen: the copy keeps running
        t = closing(SSHTransport(h))
        log2 = tmp_path / "state" / "runs" / "20261201T010000Z-def456" / "h1" / "0-quick-probe.log"
        with pytest.raises(JobStillRunning) as err:
            t.run(["touch", str(canary)], timeout_s=10, log_path=log2)
        assert err.value.exit_code == 1 and err.value.host == "h1"
        assert f"h1: an earlier copy of 0-quick-probe is still running as pid {session_id(sleeper)}" in str(err.value)
        assert "20261201T000000Z-abc123" in str(err.value), "names the run that started it"
        assert not canary.exists() and pids_with("sleep 316.1") == [sleeper], "no second copy, the first untouched"
        other = t.run(["true"], timeout_s=10, log_path=log2.with_name("0-quick-other.log"))
        assert other.ok, "another step runs"
        os.kill(ctl.pid, signal.SIGKILL)
        os.kill(ctl.pid, signal.SIGCONT)
        ctl.wait(10)
        wait_for(lambda: not pids_with("sleep 316.1"), 15, "first copy gone")
        again = t.run(["touch", str(canary)], timeout_s=10, log_path=log2)
        assert again.ok and canary.exists()
    finally:
        for sig in (signal.SIGKILL, signal.SIGCONT):
            try:
                os.kill(ctl.pid, sig)
            except ProcessLookupError:
                pass
        for p in pids_with("sleep 316.1"):
            os.kill(p, signal.SIGKILL)


def test_a_stale_pid_file_is_removed_and_not_reported(fault_lab, tmp_path, closing):
    lab = fault_lab(1)
    jobs = tmp_path / "r" / "jobs"
    jobs.mkdir(parents=True)
    dead = os.fork()
    if dead == 0:
        os._exit(0)
    os.waitpid(dead, 0)
    (jobs / "0-quick-probe.pid").write_text(f"pgid={dead} run=old started=x token=t\n")
    t = closing(SSHTransport(host(lab, "h1", tmp_path / "r")))
    assert t.running_job("0-quick-probe") is None
    assert not (jobs / "0-quick-probe.pid").exists()


def test_local_transport_records_and_reports_a_running_copy(tmp_path):
    t = LocalTransport("local", jobs_dir=tmp_path / "jobs")
    out: dict[str, object] = {}
    th = threading.Thread(
        target=lambda: out.setdefault("r", t.run(["sleep", "314.1"], timeout_s=60, log_path=_log(tmp_path, "local")))
    )
    th.start()
    [sleeper] = wait_for(lambda: programs_with("sleep 314.1"), what="local step")
    job = wait_for(lambda: t.running_job("0-quick-probe"), what="local job record")
    assert job.pgid == sleeper and "still running as pid" in job.describe()
    from orchestrator.transport.base import JobStillRunning

    with pytest.raises(
        JobStillRunning, match=f"local: an earlier copy of 0-quick-probe is still running as pid {sleeper}"
    ):
        t.run(["sleep", "314.2"], timeout_s=60, log_path=_log(tmp_path, "local"))
    assert pids_with("sleep 314.2") == []
    terminate_all(1.0)
    th.join(10)
    assert pids_with("sleep 314.1") == []
    assert t.running_job("0-quick-probe") is None and not (tmp_path / "jobs" / "0-quick-probe.pid").exists()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_cli_interrupt_during_a_remote_step_kills_it_on_every_host_then_records_interrupted(fault_lab, tmp_path, sig):
    from faultkit import Project, phase_doc

    from tests.support.sshd_lab import inventory_doc, write_inventory

    lab = fault_lab(2)
    proj = Project(tmp_path, phase_doc(sleep_s=300, timeout_s=600))
    remote = tmp_path / "remote"
    inv = write_inventory(tmp_path / "inv.yaml", inventory_doc(lab, remote))
    p = proj.popen("run", "0", "--inventory", str(inv), "--json", "--yes")
    try:
        pids = {
            n: int(
                wait_for(lambda n=n: (remote / n / "probe" / "pid").exists(), 60, f"step on {n}")
                and (remote / n / "probe" / "pid").read_text()
            )
            for n in ("h1", "h2")
        }
        assert all(session_id(pid) == pgid_of(pid) for pid in pids.values())
        p.send_signal(sig)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, (out[-800:], err[-800:])
    # host side: the step (and its group) is gone on both hosts, its pid file too
    for n, pid in pids.items():
        assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split(") ")[1][0] == "Z", n
        assert not (remote / n / "jobs" / "0-quick-probe.pid").exists(), n
    st = proj.state_doc()
    step = st["phases"]["0"]["steps"][0]
    assert {n: step["hosts"][n]["status"] for n in ("h1", "h2")} == {"h1": "interrupted", "h2": "interrupted"}


def test_a_second_controller_is_refused_on_a_host_where_the_step_still_runs(fault_lab, tmp_path):
    """Two state dirs (two operators, or a state restored from backup) drive the same host: the
    second run's step fails on that host naming the pid, and no second copy starts there."""
    from faultkit import Project, phase_doc

    from tests.support.sshd_lab import inventory_doc, write_inventory

    lab = fault_lab(1)
    remote = tmp_path / "remote"
    inv = write_inventory(tmp_path / "inv.yaml", inventory_doc(lab, remote))
    first = Project(tmp_path / "a", phase_doc(sleep_s=300, timeout_s=600))
    second = Project(tmp_path / "b", phase_doc(sleep_s=0, timeout_s=600))
    p = first.popen("run", "0", "--inventory", str(inv), "--json", "--yes")
    pid_path = remote / "h1" / "probe" / "pid"
    try:
        wait_for(pid_path.exists, 60, "first run's step on h1")
        pid = int(pid_path.read_text())
        os.kill(p.pid, signal.SIGSTOP)  # frozen: its connection stays open, so the host keeps the step
        code, doc = second.cli("run", "0", "--inventory", str(inv), "--json", "--yes")
        assert code == 1, doc
        st = second.state_doc()
        r = st["phases"]["0"]["steps"][0]["hosts"]["h1"]
        assert r["status"] == "failed"
        assert f"h1: an earlier copy of 0-quick-probe is still running as pid {session_id(pid)}" in r["reason"]
        assert int(pid_path.read_text()) == pid and os.path.exists(f"/proc/{pid}"), "the first copy is untouched"
    finally:
        os.kill(p.pid, signal.SIGKILL)
        os.kill(p.pid, signal.SIGCONT)
        p.communicate(timeout=30)
    wait_for(
        lambda: not os.path.exists(f"/proc/{pid}") or "Z" in open(f"/proc/{pid}/stat").read().split(") ")[1][:1],
        15,
        "the first run's step killed once its controller died",
    )


def test_local_transport_keeps_job_records_in_the_state_dir(tmp_path):
    """A ``connection: local`` host writes its job records under ``<state>/jobs/<host>/`` (nothing
    outside the state dir) and refuses a second copy of a running step."""
    from orchestrator.transport.base import JobStillRunning

    t = LocalTransport("local")
    log = _log(tmp_path, "local")
    th = threading.Thread(target=lambda: t.run(["sleep", "317.1"], timeout_s=60, log_path=log))
    th.start()
    try:
        [sleeper] = wait_for(lambda: programs_with("sleep 317.1"), what="local step")
        pid_file = tmp_path / "state" / "jobs" / "local" / "0-quick-probe.pid"
        wait_for(pid_file.exists, what="record in the state dir")
        with pytest.raises(JobStillRunning, match=f"still running as pid {sleeper}"):
            LocalTransport("local").run(["sleep", "317.2"], timeout_s=60, log_path=log)
        assert pids_with("sleep 317.2") == []
    finally:
        terminate_all(1.0)
        th.join(10)
    assert pids_with("sleep 317.1") == [] and not pid_file.exists()
