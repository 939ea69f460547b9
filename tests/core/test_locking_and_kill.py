"""One run at a time; a run killed at any point leaves state that loads, tells the truth and resumes."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from core_helpers import phase, step, tool

from orchestrator.errors import StateConflict
from orchestrator.state import RunLock, RunState, StateStore, Status
from tests.support.waiting import wait_until


def wait_for(path: Path, timeout: float = 60) -> None:
    wait_until(path.exists, timeout, f"{path} to appear")


def wait_gone(pid: int, timeout: float = 10) -> None:
    """The process ``pid`` ends (or is a zombie) within ``timeout``: a local step whose controller
    was SIGKILLed is killed by the wrapper's dead man's switch (docs/state-machine.md)."""

    def gone() -> bool:
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
        except OSError:
            return True

    wait_until(gone, timeout, f"the killed run's step (pid {pid}) to be gone")


@pytest.fixture
def sleepy(ws):
    """Phase 0: a quick step, then `slow` which sleeps 60 s the first time only (marker file)."""
    ws.started = ws.root / "started"
    ws.write_phase(
        phase(
            0,
            "slow",
            [
                step("quick", tool("--metric", "n=1"), metrics=["n"]),
                step(
                    "slow",
                    tool("--started", str(ws.started), "--sleep-once", str(ws.root / "slept"), "60"),
                    timeout_s=120,
                ),
            ],
        )
    )
    return ws


def test_second_concurrent_run_exits_6_naming_the_holder(sleepy):
    first = sleepy.popen("run", "0")
    try:
        wait_for(sleepy.started)
        second = sleepy.cli("run", "0", "--json")
        assert second.returncode == 6, second.stderr
        err = json.loads(second.stdout)["errors"][0]
        assert err["code"] == "STATE_CONFLICT"
        assert f"pid {first.pid}" in err["message"] and "since" in err["message"] and "run 0" in err["message"]
        human = sleepy.cli("run", "0")
        assert human.returncode == 6 and f"locked by pid {first.pid}" in human.stderr
    finally:
        first.kill()
        first.wait()


def test_sigkill_mid_step_leaves_truthful_state_and_resume_completes(sleepy):
    first = sleepy.popen("run", "0")
    wait_for(sleepy.started)
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    wait_gone(int(sleepy.started.read_text()))  # the local step died with its controller

    status = sleepy.cli("status", "--json")
    assert status.returncode == 0, status.stderr
    st = json.loads(status.stdout)["results"]["state"]["phases"]["0"]
    slow = next(s for s in st["steps"] if s["id"] == "slow")
    quick = next(s for s in st["steps"] if s["id"] == "quick")
    assert slow["hosts"]["local"]["status"] == "interrupted" and "interrupted" in slow["hosts"]["local"]["reason"]
    assert quick["hosts"]["local"]["status"] == "completed"
    human = sleepy.cli("status")
    assert "interrupted" in human.stdout

    resume = sleepy.cli("run", "0", "--json")
    assert resume.returncode == 0, resume.stdout + resume.stderr
    doc = json.loads(resume.stdout)
    assert any("interrupted" in w for w in doc["warnings"]) and any("stale lock" in w for w in doc["warnings"])
    rec = doc["results"]["phases"][0]
    assert rec["status"] == "completed"
    quick_after = next(s for s in rec["steps"] if s["id"] == "quick")["hosts"]["local"]
    assert quick_after["started_at"] == quick["hosts"]["local"]["started_at"]  # kept, not re-run


def test_sigterm_records_interrupted_and_exits_130(sleepy):
    first = sleepy.popen("run", "0")
    wait_for(sleepy.started)
    first.send_signal(signal.SIGTERM)
    out, err = first.communicate(timeout=60)
    assert first.returncode == 130, err
    st = json.loads((sleepy.state / "state.json").read_text())
    slow = next(s for s in st["phases"]["0"]["steps"] if s["id"] == "slow")
    assert slow["hosts"]["local"]["status"] == "interrupted"
    with pytest.raises(ProcessLookupError):  # the step's process group was killed too
        os.kill(int(sleepy.started.read_text()), 0)


def test_lock_in_process_names_holder_and_detects_stale_info(tmp_path):
    with RunLock(tmp_path, "orchestrator run 0") as lock:
        assert lock.stale is None
        with pytest.raises(StateConflict, match=r"locked by pid \d+ on .*orchestrator run 0"):
            RunLock(tmp_path, "second").acquire()
    (tmp_path / "lock.json").write_text(
        json.dumps(
            {
                "pid": 2**22 + 12345,
                "hostname": os.uname().nodename,
                "user": "x",
                "started_at": "t",
                "command": "dead run",
            }
        )
    )
    with RunLock(tmp_path, "third") as lock:
        assert lock.stale is not None and lock.stale.command == "dead run"


def test_state_roundtrip_and_atomic_replace(tmp_path):
    store = StateStore(tmp_path)
    assert store.load().phases == {}
    st = RunState()
    store.save(st)
    assert store.load().schema_version == 1
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]  # no temp files left behind


def test_newer_schema_version_is_refused_with_6(ws):
    ws.state.mkdir()
    (ws.state / "state.json").write_text(json.dumps({"schema_version": 99}))
    r = ws.cli("status")
    assert r.returncode == 6 and "schema_version: 99 is newer" in r.stderr
    r = ws.cli("run", "0", "--json")
    assert r.returncode in (3, 6)  # 3 if no phase 0 exists in this workspace


def test_corrupt_state_is_refused_with_6_not_overwritten(ws):
    ws.state.mkdir()
    (ws.state / "state.json").write_text("{not json")
    r = ws.cli("status")
    assert r.returncode == 6 and "not valid JSON" in r.stderr
    assert (ws.state / "state.json").read_text() == "{not json"


def test_in_progress_with_no_lock_holder_displays_interrupted(tmp_path):
    from orchestrator.state import HostStepResult, PhaseRecord, StepRecord

    st = RunState()
    st.phases["0"] = PhaseRecord(
        id=0,
        name="x",
        status=Status.in_progress,
        steps=[
            StepRecord(
                id="s",
                content="c",
                status=Status.in_progress,
                hosts={"local": HostStepResult(status=Status.in_progress)},
            )
        ],
    )
    store = StateStore(tmp_path)
    store.save(st)
    shown = store.load_for_display()
    assert shown.phases["0"].steps[0].hosts["local"].status == Status.interrupted
    assert store.load().phases["0"].steps[0].hosts["local"].status == Status.in_progress  # display only


def test_status_reports_stale_lock_info_of_a_dead_run(sleepy):
    first = sleepy.popen("run", "0")
    wait_for(sleepy.started)
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    wait_gone(int(sleepy.started.read_text()))
    r = sleepy.cli("status")
    assert r.returncode == 0
    assert f"stale lock info from a run that is gone: pid {first.pid}" in r.stderr
    doc = json.loads(sleepy.cli("status", "--json").stdout)["results"]
    assert doc["lock_held"] is False and doc["stale_lock"].startswith(f"pid {first.pid}")


def test_a_transport_that_raises_fails_the_step_instead_of_leaving_it_in_progress(ws):
    from orchestrator.engine import Engine
    from orchestrator.inventory import load_inventory
    from orchestrator.specs import load_catalog

    ws.write_phase(phase(0, "a", [step("s", tool())]))

    class Broken:
        host_name = "local"

        def run(self, *a, **k):
            raise RuntimeError("socket exploded")

        def put(self, *a, **k):  # pragma: no cover
            raise NotImplementedError

        def close(self):
            pass

    eng = Engine(
        catalog=load_catalog(ws.phases),
        inventory=load_inventory(ws.inventory),
        state_dir=ws.state,
        transport_factory=lambda h: Broken(),
    )
    report = eng.run(["0"])
    res = report.phases[0].steps[0].hosts["local"]
    assert report.exit_code == 1 and res.status == Status.failed and "socket exploded" in res.reason
    assert StateStore(ws.state).load().in_progress_steps() == []


def test_sigint_records_interrupted_and_exits_130_with_one_json_document(sleepy):
    first = sleepy.popen("run", "0", "--json")
    wait_for(sleepy.started)
    first.send_signal(signal.SIGINT)
    out, err = first.communicate(timeout=60)
    assert first.returncode == 130, err
    doc = json.loads(out)
    assert doc["exit_code"] == 130 and doc["errors"][0]["code"] == "INTERRUPTED"
    st = json.loads((sleepy.state / "state.json").read_text())
    assert st["phases"]["0"]["status"] == "interrupted"
