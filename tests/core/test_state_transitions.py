"""Every transition of docs/state-machine.md, driven through the CLI on local hosts.

The "service" is phase 1 (`cut`): `probe` (each host), then `switch` and `check` (canary first,
both undone by rollback step `undo`). `check` fails while the file ``fail`` exists. Phase 2
(`use`) requires phase 1. Each test asserts the state (status/plan) after the transition.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
import yaml
from core_helpers import invoke, phase, step, tool

from orchestrator import records
from orchestrator.approval import evidence_lines
from orchestrator.state import HostPhase, HostStepResult, PhaseRecord, RunState, Status, StepRecord


def checker(flag: Path, log: Path) -> list[str]:
    """Fails (ok=false, exit 1) while ``flag`` exists; logs every call."""
    return [
        "{python}",
        "-c",
        "import json,os,sys; open(sys.argv[2],'a').write('check\\n'); ok=not os.path.exists(sys.argv[1]);"
        "print(json.dumps({{'ok': ok}})); sys.exit(0 if ok else 1)",
        str(flag),
        str(log),
    ]


@pytest.fixture
def svc(ws):
    ws.fail = ws.root / "fail"
    ws.log = ws.root / "calls"
    ws.undo_started = ws.root / "undo-started"
    ws.write_phase(phase(0, "pre", [step("p", tool("--metric", "n=1"), metrics=["n"])]))
    ws.write_phase(
        phase(
            1,
            "cut",
            [
                step("probe", tool("--touch", str(ws.log))),
                step(
                    "switch",
                    tool("--touch", str(ws.log)),
                    runs_on="canary_then_rest",
                    requires_approval=True,
                    rollback="undo",
                ),
                step("check", checker(ws.fail, ws.log), runs_on="canary_then_rest", rollback="undo"),
            ],
            undo="orchestrator rollback 1",
            rollback_steps=[step("undo", tool("--touch", str(ws.log)))],
        )
    )
    ws.write_phase(phase(2, "use", [step("u", tool())]))
    assert invoke("run", "0").exit_code == 0
    return ws


def plan_doc(*args: str) -> dict:
    r = invoke("plan", *args, "--json")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)["plan"]


def approve_run(*phases: str) -> tuple[int, dict]:
    r = invoke("run", *phases, "--json", "--approve", plan_doc(*phases)["digest"])
    return r.exit_code, json.loads(r.stdout)


def host_phase(ws, pid: int, host: str = "local") -> dict:
    return ws.state_json()["phases"][str(pid)]["hosts"][host]


def step_result(ws, pid: int, sid: str, host: str = "local") -> dict | None:
    rec = ws.state_json()["phases"][str(pid)]
    return next(s for s in rec["steps"] if s["id"] == sid)["hosts"].get(host)


def action(ws, pid: int, host: str = "local") -> dict:
    return next(a for a in plan_doc(str(pid))["phases"][0]["actions"] if a["host"] == host)


def calls(ws) -> int:
    return len(ws.log.read_text().splitlines()) if ws.log.exists() else 0


# ----------------------------------------------------------------------------- run
def test_run_pending_to_completed_then_up_to_date(svc):
    assert action(svc, 1)["action"] == "run"
    code, _ = approve_run("1")
    assert code == 0
    assert host_phase(svc, 1)["status"] == "completed"
    assert all(step_result(svc, 1, s)["status"] == "completed" for s in ("probe", "switch", "check"))
    assert action(svc, 1)["action"] == "up_to_date"


def test_up_to_date_phase_that_needs_approval_exits_0_without_approval(svc):
    assert approve_run("1")[0] == 0
    assert plan_doc("1")["phases"][0]["to_approve"] is False
    before, n = svc.state_bytes(), calls(svc)
    r = invoke("run", "1", "--json")  # no TTY, no --approve
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["results"]["skipped_phases"] == ["1-cut"]
    assert calls(svc) == n and svc.state_bytes() == before
    assert invoke("plan", "1").stdout.count("--approve") == 0  # no approval hint for an up-to-date phase
    # --yes re-runs it, so approval is needed again
    assert invoke("run", "1", "--json", "--yes").exit_code == 5


def test_failed_step_rolls_back_resets_the_undone_steps_and_resumes_from_the_first(svc):
    svc.fail.write_text("x")
    code, doc = approve_run("1")
    assert code == 1
    hp = host_phase(svc, 1)
    assert hp["status"] == "failed" and "step check" in hp["reason"] and "rolled back (undo)" in hp["reason"]
    assert step_result(svc, 1, "probe")["status"] == "completed"  # not undone by the rollback
    sw = step_result(svc, 1, "switch")
    assert sw["status"] == "pending" and sw["reason"].startswith("undone by rollback (undo)")
    assert step_result(svc, 1, "check")["status"] == "failed"  # the evidence of the failure stays
    assert step_result(svc, 1, "undo")["status"] == "completed"
    a = action(svc, 1)
    assert (a["action"], a["from_step"]) == ("resume", "switch") and "keeps probe" in a["detail"]
    svc.fail.unlink()
    before = svc.log.read_text().count("--touch")
    code, doc = approve_run("1")
    assert code == 0, doc["errors"]
    log = svc.log.read_text()
    assert log.count("--touch") == before + 1  # switch ran again; probe was kept
    assert host_phase(svc, 1)["status"] == "completed"


def test_an_automatic_rollback_also_resets_the_phases_that_depend_on_it(svc):
    assert approve_run("1")[0] == 0
    assert invoke("run", "2").exit_code == 0
    svc.fail.write_text("x")
    d = plan_doc("1")["digest"]
    r = invoke("run", "1", "--yes", "--json", "--approve", d)  # re-run the passed phase: it fails, rolls back
    assert r.exit_code == 1, r.output
    dep = host_phase(svc, 2)
    assert dep["status"] == "pending" and "phase 1-cut was rolled back on local" in dep["reason"]
    assert action(svc, 2)["action"] == "refused"


def test_a_run_killed_after_its_last_step_resumes_without_running_any_step_again(svc):
    assert approve_run("1")[0] == 0
    st = svc.state_json()  # as if SIGKILLed between the last step and the end of the phase
    st["phases"]["1"]["status"] = st["phases"]["1"]["hosts"]["local"]["status"] = "in_progress"
    (svc.state / "state.json").write_text(json.dumps(st))
    a = action(svc, 1)
    assert (a["action"], a["from_step"]) == ("resume", None) and "every step completed" in a["detail"]
    n = calls(svc)
    code, _ = approve_run("1")
    assert code == 0 and calls(svc) == n
    assert host_phase(svc, 1)["status"] == "completed"


def test_orchestrator_rollback_resets_the_phase_and_the_phases_that_depend_on_it(svc):
    assert approve_run("1")[0] == 0
    assert invoke("run", "2").exit_code == 0
    assert host_phase(svc, 2)["status"] == "completed"
    dr = json.loads(invoke("rollback", "1", "--dry-run", "--json").stdout)
    r = invoke("rollback", "1", "--json", "--approve", dr["plan"]["rollback_digest"])
    assert r.exit_code == 0, r.output
    hp = host_phase(svc, 1)
    assert hp["status"] == "pending" and hp["reason"].startswith("rolled back (undo)")
    assert svc.state_json()["phases"]["1"]["status"] == "pending"
    assert [step_result(svc, 1, s)["status"] for s in ("probe", "switch", "check")] == [
        "completed",
        "pending",
        "pending",
    ]
    a = action(svc, 1)
    assert (a["action"], a["from_step"]) == ("resume", "switch")
    dep = host_phase(svc, 2)
    assert dep["status"] == "pending" and "phase 1-cut was rolled back on local" in dep["reason"]
    assert step_result(svc, 2, "u")["status"] == "pending"
    assert action(svc, 2)["action"] == "refused"
    # the next run of phase 1 resumes from switch, not from the start
    assert approve_run("1")[0] == 0 and host_phase(svc, 1)["status"] == "completed"


def test_a_failed_rollback_leaves_the_phase_failed_with_the_reason(svc):
    assert approve_run("1")[0] == 0
    spec = svc.phases / "1-cut.yaml"
    doc = yaml.safe_load(spec.read_text())  # `undo` now fails
    doc["rollback_steps"][0]["command"] = tool("--ok", "false")
    spec.write_text(yaml.safe_dump(doc, sort_keys=False))
    dr = json.loads(invoke("rollback", "1", "--dry-run", "--json").stdout)
    r = invoke("rollback", "1", "--json", "--approve", dr["plan"]["rollback_digest"])
    assert r.exit_code == 1, r.output
    hp = host_phase(svc, 1)
    assert hp["status"] == "failed" and hp["reason"].startswith("rollback undo: ")
    assert svc.state_json()["phases"]["1"]["status"] == "failed"
    assert json.loads(r.stdout)["errors"][0]["host"] == "local"
    assert action(svc, 1)["action"] != "up_to_date"


def test_an_interrupted_rollback_leaves_the_phase_failed_never_completed(svc):
    assert approve_run("1")[0] == 0
    assert action(svc, 2)["action"] == "run"
    spec = svc.phases / "1-cut.yaml"
    doc = yaml.safe_load(spec.read_text())
    doc["rollback_steps"][0]["command"] = tool("--started", str(svc.undo_started), "--sleep", "60")
    doc["rollback_steps"][0]["timeout_s"] = 120
    spec.write_text(yaml.safe_dump(doc, sort_keys=False))
    dr = json.loads(invoke("rollback", "1", "--dry-run", "--json").stdout)
    proc = svc.popen("rollback", "1", "--json", "--approve", dr["plan"]["rollback_digest"])
    end = time.monotonic() + 60
    while not svc.undo_started.exists():
        assert time.monotonic() < end and proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    hp = host_phase(svc, 1)
    assert hp["status"] == "failed" and "has not finished" in hp["reason"]
    assert svc.state_json()["phases"]["1"]["status"] == "failed"
    assert step_result(svc, 1, "undo")["status"] == "interrupted"
    assert action(svc, 1)["action"] != "up_to_date"
    assert action(svc, 2)["action"] == "refused"  # nothing builds on a half rolled back phase
    st = json.loads(invoke("status", "--json").stdout)["results"]["state"]["phases"]["1"]
    assert st["status"] == "failed"


# ----------------------------------------------------------------------------- refusal, approval summary
@pytest.mark.parametrize("mode", [["--json"], ["--interactive"], []])
def test_predecessor_not_passed_exits_1_whatever_the_tty(ws, mode):
    ws.write_phase(phase(0, "a", [step("s", tool("--ok", "false"))]))
    ws.write_phase(
        phase(1, "b", [step("t", tool("--touch", str(ws.root / "ran")), requires_approval=True, changes="x")])
    )
    invoke("run", "0")
    r = invoke("run", "1", *mode, input="yes\n")
    assert r.exit_code == 1, r.output
    assert "phase 0-a has not passed on local" in (r.stdout + r.stderr)
    assert not (ws.root / "ran").exists()


def test_approval_summary_shows_each_hosts_action(svc):
    svc.fail.write_text("x")
    assert approve_run("1")[0] == 1
    svc.fail.unlink()
    r = invoke("run", "1", "--interactive", input="no\n")
    assert r.exit_code == 5
    assert "local: ~ resume from switch" in r.stderr


def test_blocked_or_failed_evidence_is_marked_not_shown_as_numbers():
    ev = {
        "2-bench": {
            "hosts": {
                "h1": {"b": {"status": "blocked", "reason": "no CUDA device", "metrics": {"x": 1}, "gates": []}},
                "h2": {
                    "b": {
                        "status": "completed",
                        "metrics": {"x": 2},
                        "gates": [{"gate": "x >= 1", "actual": 2, "passed": True}],
                    }
                },
            }
        }
    }
    lines = evidence_lines(ev)
    assert lines[0] == "2-bench b @ h1: BLOCKED: no CUDA device"
    assert lines[1] == "2-bench b @ h2: x >= 1 -> 2 (pass)"


# ----------------------------------------------------------------------------- unreadable state
@pytest.mark.parametrize("content", [b"\xff\xfe not utf-8", b"{not json"])
@pytest.mark.parametrize("command", [["status"], ["plan", "0"], ["run", "0"]])
def test_unreadable_state_exits_6_naming_the_file_and_leaves_it(ws, content, command):
    ws.write_phase(phase(0, "a", [step("s", tool())]))
    ws.state.mkdir(parents=True)
    (ws.state / "state.json").write_bytes(content)
    r = invoke(*command, "--json")
    assert r.exit_code == 6, r.output
    err = json.loads(r.stdout)["errors"][0]
    assert err["code"] == "STATE_CONFLICT" and str(ws.state / "state.json") in err["message"]
    assert (ws.state / "state.json").read_bytes() == content


def test_a_state_file_that_cannot_be_read_exits_6(ws):
    ws.write_phase(phase(0, "a", [step("s", tool())]))
    (ws.state / "state.json").mkdir(parents=True)  # a directory where the file should be
    r = invoke("status", "--json")
    assert r.exit_code == 6 and "cannot read the state file" in json.loads(r.stdout)["errors"][0]["message"]


# ----------------------------------------------------------------------------- record functions
def _rec() -> PhaseRecord:
    rec = PhaseRecord(id=1, name="cut")
    rec.hosts["h"] = HostPhase(status=Status.in_progress)
    rec.steps.append(StepRecord(id="s", content="s", hosts={"h": HostStepResult(status=Status.in_progress)}))
    return rec


def test_mark_interrupted_turns_in_progress_into_interrupted_and_keeps_failed():
    state = RunState(phases={"1": _rec()})
    state.phases["1"].hosts["g"] = HostPhase(status=Status.failed, reason="rollback did not finish")
    assert records.mark_interrupted(state, "signal") == 1
    rec = state.phases["1"]
    assert rec.hosts["h"].status == Status.interrupted and rec.steps[0].hosts["h"].status == Status.interrupted
    assert rec.hosts["g"].status == Status.failed and rec.hosts["g"].reason == "rollback did not finish"


def test_begin_rollback_is_failed_until_end_rollback():
    rec = _rec()
    records.begin_rollback(rec, "h", ["undo"], "run1", "orchestrator rollback 1", ["h"])
    assert rec.hosts["h"].status == Status.failed and rec.status == Status.failed
    records.end_rollback(rec, "h", Status.pending, "rolled back (undo)", ["h"])
    assert rec.hosts["h"].status == Status.pending and rec.status == Status.pending


def test_skip_step_and_end_step_aggregate():
    sr = StepRecord(id="s", content="s")
    records.skip_step(sr, "a", "wave failed")
    assert sr.status == Status.skipped
    r = records.start_step(sr, "b", Path("/tmp/x.log"))
    assert sr.status == Status.in_progress
    r.status = Status.completed
    records.end_step(sr, "b", r)
    assert sr.status == Status.completed and sr.finished_at


def test_command_timeout_caps_the_planned_step_timeout(ws):
    ws.hosts(["local"], command_timeout_s=5)
    ws.write_phase(phase(0, "a", [step("s", tool(), timeout_s=30)]))
    cmd = plan_doc("0")["phases"][0]["steps"][0]["commands"][0]
    assert cmd["timeout_s"] == 5
