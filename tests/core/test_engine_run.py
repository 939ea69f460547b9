"""Running phases on local hosts: step outcomes, gates, evidence, ordering, waves, rollback."""

from __future__ import annotations

import json

from core_helpers import invoke, phase, step, tool


def gate(metric, op, value, reason="r"):
    return {"metric": metric, "op": op, "value": value, "reason": reason}


def run_json(*args):
    r = invoke("run", *args, "--json")
    return r, json.loads(r.stdout)


def host_result(doc, phase_idx, step_id, host="local"):
    rec = doc["results"]["phases"][phase_idx]
    return next(s for s in rec["steps"] if s["id"] == step_id)["hosts"][host]


def test_completed_step_records_metrics_gates_and_log(ws):
    ws.write_phase(
        phase(
            0,
            "build",
            [
                step(
                    "build",
                    tool("--metric", "summary.spill_bytes=0", "--metric", "summary.regs=128"),
                    metrics=["summary.spill_bytes", "summary.regs"],
                    gates=[gate("summary.spill_bytes", "==", 0)],
                )
            ],
        )
    )
    r, doc = run_json("0")
    assert r.exit_code == 0, r.output
    res = host_result(doc, 0, "build")
    assert res["status"] == "completed" and res["exit_code"] == 0
    assert res["metrics"] == {"summary.spill_bytes": 0, "summary.regs": 128}
    assert res["gates"][0]["passed"] is True and res["gates"][0]["actual"] == 0
    assert res["log_path"] and res["duration_s"] >= 0
    st = ws.state_json()
    assert st["phases"]["0"]["status"] == "completed"
    assert st["phases"]["0"]["hosts"]["local"]["status"] == "completed"


def test_failed_gate_fails_the_step_and_exits_1(ws):
    ws.write_phase(
        phase(
            0,
            "build",
            [
                step(
                    "build",
                    tool("--metric", "summary.spill_bytes=64"),
                    metrics=["summary.spill_bytes"],
                    gates=[gate("summary.spill_bytes", "==", 0, "no spills")],
                )
            ],
        )
    )
    r, doc = run_json("0")
    assert r.exit_code == 1
    res = host_result(doc, 0, "build")
    assert res["status"] == "failed" and "summary.spill_bytes" in res["reason"] and "no spills" in res["reason"]
    assert doc["errors"][0]["host"] == "local"


def test_missing_metric_fails_the_gate(ws):
    ws.write_phase(
        phase(
            0, "p", [step("s", tool(), metrics=["summary.cases_failed"], gates=[gate("summary.cases_failed", "==", 0)])]
        )
    )
    r, doc = run_json("0")
    assert r.exit_code == 1
    assert "missing" in host_result(doc, 0, "s")["reason"]


def test_blocked_tool_is_blocked_never_completed(ws):
    ws.write_phase(phase(0, "p", [step("s", tool("--blocked", "no CUDA device on host local"))]))
    r, doc = run_json("0")
    assert r.exit_code == 1
    res = host_result(doc, 0, "s")
    assert res["status"] == "blocked" and res["reason"] == "no CUDA device on host local" and res["exit_code"] == 75
    assert ws.state_json()["phases"]["0"]["status"] == "blocked"


def test_missing_tool_module_is_blocked_with_the_reason(ws):
    ws.write_phase(phase(0, "p", [step("s", ["{python}", "-m", "kernels.no_such_tool_xyz", "--json"])]))
    r, doc = run_json("0")
    res = host_result(doc, 0, "s")
    assert res["status"] == "blocked" and "kernels.no_such_tool_xyz is not in the bundle" in res["reason"]


def test_non_json_output_and_ok_false_fail(ws):
    ws.write_phase(phase(0, "p", [step("a", tool("--raw", "hello")), step("b", tool())]))
    r, doc = run_json("0")
    assert host_result(doc, 0, "a")["status"] == "failed"
    assert "not one JSON document" in host_result(doc, 0, "a")["reason"]
    b = next(s for s in doc["results"]["phases"][0]["steps"] if s["id"] == "b")
    assert b["status"] == "skipped" and b["hosts"] == {}
    ws.write_phase(phase(0, "p", [step("a", tool("--ok", "false", "--exit", "0"))]))
    r, doc = run_json("0")
    assert host_result(doc, 0, "a")["status"] == "failed" and "ok=false" in host_result(doc, 0, "a")["reason"]


def test_timeout_kills_and_fails_the_step(ws):
    ws.write_phase(phase(0, "p", [step("slow", tool("--sleep", "30"), timeout_s=0.5)]))
    r, doc = run_json("0")
    res = host_result(doc, 0, "slow")
    assert res["status"] == "failed" and "timed out after 0.5 s" in res["reason"] and res["duration_s"] < 20


def test_phase_refuses_to_run_before_its_predecessor_passed(ws):
    ws.write_phase(phase(0, "a", [step("s", tool("--ok", "false"))]))
    ws.write_phase(phase(1, "b", [step("t", tool("--touch", str(ws.root / "ran")))]))
    invoke("run", "0")
    r = invoke("run", "1")
    assert r.exit_code == 1
    assert "phase 0-a has not passed on local" in r.stderr and "orchestrator run 0" in r.stderr
    assert not (ws.root / "ran").exists()


def test_later_phase_stops_when_an_earlier_one_fails_in_the_same_run(ws):
    ws.write_phase(phase(0, "a", [step("s", tool("--ok", "false"))]))
    ws.write_phase(phase(1, "b", [step("t", tool("--touch", str(ws.root / "ran")))]))
    r = invoke("run", "--all")
    assert r.exit_code == 1 and not (ws.root / "ran").exists()


def test_passed_phase_is_up_to_date_and_yes_reruns_it(ws):
    marker = ws.root / "count"
    ws.write_phase(phase(0, "a", [step("s", tool("--touch", str(marker)))]))
    assert invoke("run", "0").exit_code == 0
    r, doc = run_json("0")
    assert r.exit_code == 0 and doc["results"]["skipped_phases"] == ["0-a"]
    assert len(marker.read_text().splitlines()) == 1
    assert invoke("run", "0", "--yes").exit_code == 0
    assert len(marker.read_text().splitlines()) == 2


def test_status_shows_steps_and_evidence_numbers(ws):
    ws.write_phase(
        phase(
            0,
            "build",
            [
                step(
                    "build",
                    tool("--metric", "summary.spill_bytes=0"),
                    metrics=["summary.spill_bytes"],
                    gates=[gate("summary.spill_bytes", "==", 0)],
                )
            ],
        )
    )
    invoke("run", "0")
    r = invoke("status")
    assert r.exit_code == 0, r.output
    assert "0-build" in r.stdout and "completed" in r.stdout and "spill_bytes=0" in r.stdout
    doc = json.loads(invoke("status", "--json").stdout)
    assert doc["results"]["state"]["phases"]["0"]["steps"][0]["hosts"]["local"]["metrics"] == {"summary.spill_bytes": 0}


def test_local_placement_runs_once_for_all_hosts(ws):
    ws.hosts(["h1", "h2", "h3"])
    marker = ws.root / "ran"
    ws.write_phase(
        phase(
            0,
            "a",
            [step("once", tool("--touch", str(marker)), runs_on="local"), step("each", tool("--touch", str(marker)))],
        )
    )
    r, doc = run_json("0")
    assert r.exit_code == 0, r.output
    assert len(marker.read_text().splitlines()) == 4
    assert list(doc["results"]["phases"][0]["steps"][0]["hosts"]) == ["@local"]


def test_continue_policy_keeps_other_hosts_going(ws):
    ws.hosts(["h1", "h2", "h3"])
    # {host} lets one host fail: the fake tool exits 1 when its --ok is "false"
    ws.write_phase(
        phase(
            0,
            "a",
            [
                step(
                    "s",
                    [
                        "{python}",
                        "-c",
                        "import json,sys; h=sys.argv[1]; print(json.dumps({{'ok': h != 'h2'}}));"
                        "sys.exit(0 if h != 'h2' else 1)",
                        "{host}",
                    ],
                ),
                step("t", tool()),
            ],
            failure_policy={"mode": "continue", "max_failed_hosts": None},
        )
    )
    r, doc = run_json("0")
    assert r.exit_code == 1
    hosts = doc["results"]["phases"][0]["hosts"]
    assert {h: v["status"] for h, v in hosts.items()} == {"h1": "completed", "h2": "failed", "h3": "completed"}


def test_canary_failure_stops_later_waves_and_rolls_back_that_host(ws):
    names = ["c1", "p1", "p2", "p3", "p4"]
    ws.hosts(names, canary="c1")
    log = ws.root / "calls"
    fail_on_canary = [
        "{python}",
        "-c",
        "import json,sys; h=sys.argv[1]; open(sys.argv[2],'a').write('check '+h+'\\n');"
        "print(json.dumps({{'ok': h != 'c1'}})); sys.exit(0 if h != 'c1' else 1)",
        "{host}",
        str(log),
    ]
    ws.write_phase(
        phase(
            0,
            "cut",
            [
                step("switch", tool("--touch", str(log)), runs_on="canary_then_rest", rollback="undo"),
                step("check", fail_on_canary, runs_on="canary_then_rest"),
            ],
            waves=[1, 2, "50%"],
            rollback_steps=[step("undo", tool("--touch", str(log), "--metric", "undone=true"))],
        )
    )
    r, doc = run_json("0")
    assert r.exit_code == 1
    hosts = doc["results"]["phases"][0]["hosts"]
    assert hosts["c1"]["status"] == "failed"
    assert all(hosts[h]["status"] == "skipped" for h in names[1:]), hosts
    calls = log.read_text()
    assert calls.count("--touch") == 2  # switch on c1, then undo on c1 only
    assert "check c1" in calls and "p1" not in calls
    undo = next(s for s in doc["results"]["phases"][0]["steps"] if s["id"] == "undo")
    assert list(undo["hosts"]) == ["c1"] and undo["hosts"]["c1"]["status"] == "completed"


def test_waves_go_canary_first_then_sizes(ws):
    names = [f"h{i}" for i in range(10)]
    ws.hosts(names, canary="h3")
    ws.write_phase(phase(0, "cut", [step("s", tool(), runs_on="canary_then_rest")], waves=[1, 2, "50%"]))
    doc = json.loads(invoke("plan", "0", "--json").stdout)
    waves = doc["plan"]["phases"][0]["steps"][0]["waves"]
    assert [len(w) for w in waves] == [1, 2, 5, 2] and waves[0] == ["h3"]
    assert sorted(sum(waves, [])) == sorted(names)
