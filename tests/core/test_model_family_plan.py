"""Per-host model family (issue 14): the inventory says which kernel and SGLang route a host
needs (dense_mla | dsa | auto), the planner renders each host's variant of a step, the gates a
host's result is judged by are its family's, and an ``auto`` host runs phases 1-3 only once
phase 0's facts derived its family. Uses the shipped phases/*.yaml; connects to nothing."""

from __future__ import annotations

import json

import pytest
import yaml
from core_helpers import REPO, invoke

from orchestrator.facts import parse_model, probe_commands
from orchestrator.inventory import load_inventory
from orchestrator.outcome import interpret
from orchestrator.planner import build_plan
from orchestrator.specs import load_catalog
from orchestrator.state import HostStepResult, PhaseRecord, RunState, Status, StepRecord
from orchestrator.transport.base import CommandResult

SHA = "e" * 64
PHASES = REPO / "phases"


def _fleet(ws, **families: str):
    hosts = []
    for name, family in families.items():
        hosts.append(
            {
                "name": name,
                "address": f"{name}.example",
                "model_family": family,
                "service": {
                    "python": "/srv/sglang/bin/python",
                    "restart": ["systemctl", "restart", "sglang"],
                    "health_url": "http://127.0.0.1:30000/health",
                    "generate_url": "http://127.0.0.1:30000/generate",
                },
            }
        )
    doc = {"defaults": {"known_hosts": "/etc/ssh/known", "remote_root": "/srv/o"}, "hosts": hosts}
    ws.inventory.write_text(yaml.safe_dump(doc, sort_keys=False))
    return load_inventory(ws.inventory)


def _plan(ws, inv, phase_ids, state=None):
    cat = load_catalog(PHASES)
    selected = [cat.by_id(i) for i in phase_ids]
    return build_plan(cat, selected, inv, list(inv.hosts), state or RunState(), SHA, ws.state)


def _argv(plan, phase_id, step_id):
    ps = next(s for s in plan.phase(phase_id).steps if s.id == step_id)
    return {c.host: c for c in ps.commands}


def test_each_host_runs_the_kernel_and_route_of_its_family(ws):
    inv = _fleet(ws, glm="dsa", dsv3="dense_mla")
    plan = _plan(ws, inv, [1, 2, 3])
    assert not plan.problems and plan.families == {"glm": "dsa", "dsv3": "dense_mla"}
    parity = _argv(plan, 1, "parity")
    assert parity["glm"].argv[2] == "verify_tools.dsa_parity" and parity["glm"].model_family == "dsa"
    assert parity["dsv3"].argv[2] == "verify_tools.parity" and parity["dsv3"].model_family == "dense_mla"
    bench = _argv(plan, 2, "bench")
    assert bench["glm"].argv[2] == "verify_tools.dsa_bench" and bench["dsv3"].argv[2] == "verify_tools.bench"
    for step_id in ("probe", "switch"):
        cmds = _argv(plan, 3, step_id)
        for host, family in (("glm", "dsa"), ("dsv3", "dense_mla")):
            argv = cmds[host].argv
            assert argv[argv.index("--model-family") + 1] == family, (step_id, host)
    mixed = next(s for s in plan.phase(1).steps if s.id == "parity")
    assert "verify_tools.parity" in mixed.title, "hosts of both families: the step's own title"
    only_dsa = _plan(ws, _fleet(ws, glm="dsa"), [1]).phase(1).steps[0]
    assert "verify_tools.dsa_parity" in only_dsa.title, "one family: its variant's title"
    baseline = _argv(plan, 3, "baseline")
    assert baseline["glm"].model_family is None, "a step without variants shows no family"
    # the approval summary's per-host lines name the family
    assert [a.describe() for a in plan.phase(3).actions] == ["+ run [dsa]", "+ run [dense_mla]"]


def test_the_dry_run_on_a_mixed_fleet_passes_and_shows_each_hosts_family(ws):
    _fleet(ws, glm="dsa", dsv3="dense_mla")
    r = invoke("run", "1", "2", "3", "--dry-run", "--json", "--phases-dir", str(PHASES))
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["ok"] is True and doc["plan"]["families"] == {"glm": "dsa", "dsv3": "dense_mla"}
    text = invoke("run", "1", "--dry-run", "--phases-dir", str(PHASES)).stdout
    assert "verify_tools.dsa_parity" in text and "verify_tools.parity" in text


def test_the_family_is_part_of_what_an_approval_is_bound_to(ws):
    a = _plan(ws, _fleet(ws, glm="dsa"), [3])
    b = _plan(ws, _fleet(ws, glm="dense_mla"), [3])
    assert a.digest != b.digest and a.phase(3).digest != b.phase(3).digest


def _facts_state(host: str, family: str | None) -> RunState:
    r = HostStepResult(status=Status.completed, metrics={"model.family": family})
    rec = PhaseRecord(id=0, name="build-check", steps=[StepRecord(id="facts", content="facts", hosts={host: r})])
    return RunState(phases={"0": rec})


def test_an_auto_host_is_refused_until_phase_0_derived_its_family(ws):
    inv = _fleet(ws, mystery="auto")
    plan = _plan(ws, inv, [0, 1])
    assert not plan.problems and plan.families == {"mystery": "auto (not derived yet)"}
    assert plan.phase(0).actions[0].action == "run", "phase 0 derives it"
    (refused,) = plan.phase(1).actions
    assert refused.action == "refused" and "model_family is auto" in refused.detail and "run 0" in refused.detail
    assert _argv(plan, 1, "parity") == {}, "nothing is rendered for an unresolved family"
    r = invoke("run", "0", "1", "--phases-dir", str(PHASES), "--json")
    assert r.exit_code == 1 and "model_family is auto" in json.loads(r.stdout)["errors"][0]["message"]
    # not a family the bundle serves (the probe could not tell): still refused
    plan = _plan(ws, inv, [1], _facts_state("mystery", None))
    assert plan.phase(1).actions[0].action == "refused"


def test_an_auto_host_runs_the_family_phase_0_recorded(ws):
    inv = _fleet(ws, mystery="auto")
    plan = _plan(ws, inv, [1, 3], _facts_state("mystery", "dsa"))
    assert plan.families == {"mystery": "dsa"}
    assert _argv(plan, 1, "parity")["mystery"].argv[2] == "verify_tools.dsa_parity"
    switch = _argv(plan, 3, "switch")["mystery"].argv
    assert switch[switch.index("--model-family") + 1] == "dsa"


def test_phase_0_facts_of_an_auto_host_run_the_family_probe(ws):
    cmds = probe_commands("python3", "/srv/sglang/bin/python", "/srv/o")
    assert cmds["model"] == [
        "/srv/sglang/bin/python",
        *("-m", "cutover_agent.probe", "--family-only", "--json", "--root", "/srv/o"),
    ]
    assert "model" not in probe_commands("python3", "/srv/sglang/bin/python")
    ok = CommandResult(host="h", argv=[], exit_code=0, stdout='{"ok": true, "model_family": "dsa"}\n')
    assert parse_model(ok)["family"] == "dsa"
    bad = CommandResult(host="h", argv=[], exit_code=1, stdout="", stderr="ModuleNotFoundError: sglang\n")
    assert parse_model(bad) == {
        "family": None,
        "reason": "the family probe printed no JSON: ModuleNotFoundError: sglang",
    }


# ----------------------------------------------------------------------------- the gates per family


def _bench_doc(speedup: float, sol0: float = 0.5, sol6: float = 0.95, fp8: float = 0.55) -> str:
    summary = {
        "headline_speedup_vs_sglang_triton": speedup,
        "headline_sol": sol0,
        "headline_ours_s": 1e-5,
        "headline_sglang_triton_s": speedup * 1e-5,
        "t256_sol": sol6,
        "t64_fp8_over_bf16_time": fp8,
    }
    return json.dumps({"ok": True, "sglang_triton": "ran", "rows": [], "summary": summary, "left_out": []})


@pytest.mark.parametrize(
    "doc,status,failed",
    [
        (_bench_doc(3.4), Status.completed, None),
        (_bench_doc(0.75), Status.failed, "summary.headline_speedup_vs_sglang_triton"),  # the H200 run 3 measurement
        (_bench_doc(3.4, sol6=0.71), Status.failed, "summary.t256_sol"),
        (_bench_doc(3.4, fp8=1.18), Status.failed, "summary.t64_fp8_over_bf16_time"),
        (
            json.dumps({"ok": True, "sglang_triton": "sglang not importable", "rows": [], "left_out": []}),
            Status.failed,
            "sglang_triton",
        ),
    ],
)
def test_a_dsa_kernel_slower_than_sglangs_fails_phase_2_and_is_never_cut_over(doc, status, failed):
    bench = load_catalog(PHASES).by_id(2).spec.step("bench")
    result = CommandResult(host="glm", argv=["python", "-m", "verify_tools.dsa_bench"], exit_code=0, stdout=doc)
    out = interpret(bench, result, {"model_family": "dsa"})
    assert out.status == status, out.reason
    if failed:
        assert failed in out.reason
    # the same document judged with the dense gates fails on the dense metrics: the family decides
    dense = interpret(bench, result, {"model_family": "dense_mla"})
    assert dense.status == Status.failed and "summary.min_speedup_vs_sglang_extend" in dense.reason


def test_a_dsa_canary_needs_every_rank_on_the_dsa_route(ws):
    canary = load_catalog(PHASES).by_id(3).spec.step("canary")
    base = {
        "ok": True,
        "kernel_active": True,
        "ranks_total": 8,
        "ranks_all_active": True,
        "declined_verify_calls": 0,
        "captured_sizes_not_bundled": 0,
        "outputs_identical": True,
        "latency_ratio": 0.9,
        "healthy": True,
    }
    for route_family, status in (("dsa", Status.completed), ("dense_mla", Status.failed), (None, Status.failed)):
        doc = json.dumps({**base, "route_family": route_family})
        r = CommandResult(host="glm", argv=["python", "-m", "cutover_agent"], exit_code=0, stdout=doc)
        out = interpret(canary, r, {"model_family": "dsa"})
        assert out.status == status, (route_family, out.reason)


@pytest.mark.slow
def test_phase_0_on_an_auto_host_records_what_the_family_probe_said(ws):
    """The facts step of an auto host runs the bundle's family probe in the service python with
    its remote_root; here it cannot resolve a model (no launch arguments written), so the fact is
    None with the reason, and phase 1 stays refused on that host."""
    import sys

    from tests.support.paths import copy_kernels

    copy_kernels(ws.checkout)
    root = ws.root / "remote" / "auto"
    ws.inventory.write_text(
        yaml.safe_dump(
            {
                "hosts": [
                    {
                        "name": "auto",
                        "connection": "local",
                        "remote_root": str(root),
                        "model_family": "auto",
                        "service": {"python": sys.executable},
                    }
                ]
            }
        )
    )
    spec = yaml.safe_load((PHASES / "0-build-check.yaml").read_text())
    spec["steps"] = [s for s in spec["steps"] if s["id"] == "facts"]
    (ws.phases / "0-build-check.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    (ws.phases / "1-parity.yaml").write_text((PHASES / "1-parity.yaml").read_text())
    r = invoke("run", "0", "--json")
    assert r.exit_code == 0, r.output
    facts = json.loads(r.stdout)["results"]["phases"][0]["steps"][0]["hosts"]["auto"]["metrics"]
    assert facts["model.family"] is None and facts["model.reason"], facts
    plan = json.loads(invoke("plan", "1", "--json").stdout)["plan"]
    assert plan["phases"][0]["actions"][0]["action"] == "refused"


def test_phase_4_stops_on_a_dsa_host_before_its_service_is_touched():
    validate = load_catalog(PHASES).by_id(4).spec.step("validate")
    doc = json.dumps({"ok": True, "model_family": "dsa", "architectures": ["GlmMoeDsaForCausalLM"]})
    r = CommandResult(host="glm", argv=["python", "-m", "cutover_agent.probe"], exit_code=0, stdout=doc)
    out = interpret(validate, r, {"model_family": "dsa"})
    assert out.status == Status.failed and "page size 1 only" in out.reason
