"""Phase specs: the shipped phases validate; malformed or unsafe specs exit 3 naming file:field."""

from __future__ import annotations

import json
import re

import pytest
from core_helpers import REPO, invoke, phase, step, tool

from orchestrator.errors import SpecError
from orchestrator.specs import load_catalog


def test_shipped_phases_load_in_order_with_predecessors():
    cat = load_catalog(REPO / "phases")
    assert [p.spec.label for p in cat.phases] == [
        "0-build-check",
        "1-parity",
        "2-microbench",
        "3-integration",
        "4-kv-defrag",
    ]
    assert [p.spec.requires for p in cat.phases] == [None, 0, 1, 2, 3]
    assert [p.spec.needs_approval for p in cat.phases] == [False, False, False, True, True]


def test_shipped_phase_gates_match_the_contract():
    cat = load_catalog(REPO / "phases")
    gates = {
        (p.spec.id, s.id): {(g.metric, g.op.value, json.dumps(g.value)) for g in s.gates}
        for p in cat.phases
        for s in p.spec.steps + p.spec.rollback_steps
    }
    assert ("summary.spill_bytes", "==", "0") in gates[(0, "build")]
    assert ("summary.arch", "==", '"{arch}"') in gates[(0, "build")]
    assert {
        ("summary.cases_failed", "==", "0"),
        ("summary.token_mismatches", "==", "0"),
        ("summary.deterministic", "==", "true"),
    } <= gates[(1, "parity")]
    assert ("summary.min_speedup_vs_sglang_extend", ">=", "20") in gates[(2, "bench")]
    assert ("summary.min_sol_pct_long_ctx", ">=", "30") in gates[(2, "bench")]
    assert ("compatible", "==", "true") in gates[(3, "probe")]
    assert {("outputs_identical", "==", "true"), ("latency_ratio", "<=", "1.5")} <= gates[(3, "canary")]
    assert ("summary.lost_tokens", "==", "0") in gates[(4, "validate")]
    assert ("summary.gain_pct", ">=", "5") in gates[(4, "bench")]
    p3 = cat.resolve("integration").spec
    assert [s.id for s in p3.steps if s.requires_approval] == ["switch", "restart", "canary"]
    assert all(s.rollback == "rollback" for s in p3.steps if s.requires_approval)


def test_dsa_hosts_run_and_gate_the_sparse_kernel_and_route():
    """model_family dsa: phase 1 the DSA parity suite, phase 2 the DSA bench gated against SGLang's
    DSA kernel (a slower kernel fails there, so it is never cut over), phase 3 the dsa route."""
    cat = load_catalog(REPO / "phases")

    def dsa(pid, sid):
        s = cat.by_id(pid).spec.step(sid).for_family("dsa")
        return s, {(g.metric, g.op.value, json.dumps(g.value)) for g in s.gates}

    s, gates = dsa(1, "parity")
    assert s.command[2] == "verify_tools.dsa_parity" and ("summary.failed", "==", "0") in gates
    assert ("summary.total", ">=", "1") in gates
    s, gates = dsa(2, "bench")
    assert s.command[2] == "verify_tools.dsa_bench"
    assert {
        ("sglang_triton", "==", '"ran"'),
        ("summary.headline_speedup_vs_sglang_triton", ">=", "3"),
        ("summary.headline_sol", ">=", "0.4"),
        ("summary.t256_sol", ">=", "0.9"),
        ("summary.t64_fp8_over_bf16_time", "<=", "0.6"),
    } == gates
    s, gates = dsa(3, "probe")
    assert s.command[-2:] == ["--model-family", "{model_family}"]
    assert ("model_family_derived", "==", '"{model_family}"') in gates and ("plugin_engages", "==", "true") in gates
    s, gates = dsa(3, "switch")
    assert s.command[s.command.index("--model-family") + 1] == "{model_family}"
    assert ("model_family", "==", '"{model_family}"') in gates
    s, gates = dsa(3, "canary")
    assert {("route_family", "==", '"{model_family}"'), ("ranks_all_active", "==", "true")} <= gates
    assert ("captured_sizes_not_bundled", "==", "0") in gates and ("declined_verify_calls", "==", "0") in gates
    s, gates = dsa(4, "validate")
    assert s.command[2:4] == ["cutover_agent.probe", "--family-only"]
    assert gates == {("model_family", "==", '"dense_mla"')}, "phase 4 stops on a dsa host (page 64)"
    # dense hosts keep their steps as written; approval and rollback are the same for both families
    p3 = cat.by_id(3).spec
    for st in p3.steps:
        assert (st.for_family("dsa").requires_approval, st.for_family("dsa").rollback) == (
            st.requires_approval,
            st.rollback,
        )
    assert cat.by_id(1).spec.step("parity").for_family("dense_mla").command[2] == "verify_tools.parity"
    assert cat.by_id(2).spec.step("bench").for_family(None).command[2] == "verify_tools.bench"


def test_a_variant_replaces_only_the_fields_it_names(ws):
    ws.write_phase(
        phase(
            0,
            "a",
            [
                step(
                    "s",
                    tool("--metric", "m=1"),
                    metrics=["m"],
                    gates=[{"metric": "m", "op": ">=", "value": 1, "reason": "dense"}],
                    by_model_family={"dsa": {"gates": [{"metric": "m", "op": ">=", "value": 2, "reason": "sparse"}]}},
                )
            ],
        )
    )
    st = load_catalog(ws.phases).by_id(0).spec.steps[0]
    d = st.for_family("dsa")
    assert d.command == st.command and d.metrics == ["m"] and [g.reason for g in d.gates] == ["sparse"]
    assert st.for_family("dense_mla") is st and st.uses_family()


@pytest.mark.parametrize("key", ["3", "integration", "3-integration"])
def test_phase_resolves_by_id_name_or_label(key):
    assert load_catalog(REPO / "phases").resolve(key).spec.id == 3


def test_unknown_phase_exits_3(ws):
    ws.write_phase(phase(0, "a", [step("s", tool())]))
    r = invoke("run", "9", "--json")
    assert r.exit_code == 3, r.output
    doc = json.loads(r.stdout)
    assert doc["ok"] is False and doc["errors"][0]["code"] == "INVALID_SPEC"
    assert "unknown phase '9'" in doc["errors"][0]["message"]


def test_malformed_yaml_exits_3_with_file_and_line(ws):
    bad = ws.phases / "0-bad.yaml"
    bad.write_text("id: 0\nname: bad\nsteps: [\n  - {id: x\n")
    r = invoke("phases")
    assert r.exit_code == 3
    assert f"{bad}:" in r.stderr and "malformed YAML" in r.stderr


def test_unknown_placeholder_exits_3_naming_file_and_field(ws):
    path = ws.write_phase(phase(0, "a", [step("s", ["{python}", "-m", "x", "{secret_token}"])]))
    r = invoke("run", "0", "--dry-run")
    assert r.exit_code == 3
    assert re.search(rf"{re.escape(str(path))}:\d+: steps\[0\]\(s\)\.command", r.stderr), r.stderr
    assert "secret_token" in r.stderr


def test_gate_on_an_undeclared_metric_is_a_spec_error(ws):
    path = ws.write_phase(
        phase(
            0, "a", [step("s", tool(), metrics=["x"], gates=[{"metric": "y", "op": "==", "value": 1, "reason": "r"}])]
        )
    )
    with pytest.raises(SpecError, match=r"steps\[0\]\(s\).*'y' is not listed in metrics"):
        load_catalog(ws.phases)
    assert str(path) in str(pytest.raises(SpecError, load_catalog, ws.phases).value)


@pytest.mark.parametrize(
    "mutate,needle",
    [
        (lambda d: d["steps"].append(dict(d["steps"][0])), "duplicate step id"),
        (lambda d: d["steps"][0].update(rollback="nope"), "rollback 'nope'"),
        (lambda d: d["steps"][0].update(runs_on="everywhere"), "runs_on"),
        (lambda d: d["steps"][0].update(timeout_s=0), "timeout_s"),
        (lambda d: d["steps"][0].update(command=[]), "command is empty"),
        (lambda d: d["steps"][0].update(command=["a\nb"]), "NUL or newline"),
        (lambda d: d.update(waves=[2, 3]), "waves must start with 1"),
        (lambda d: d.update(waves=[1, "150%"]), "wave size"),
        (lambda d: d.update(surprise=True), "surprise"),
        (lambda d: d["steps"][0].update(by_model_family={"sparse": {"title": "x"}}), "sparse"),
        (lambda d: d["steps"][0].update(by_model_family={"dsa": {}}), "by_model_family.dsa changes nothing"),
        (lambda d: d["steps"][0].update(by_model_family={"dsa": {"runs_on": "local"}}), "runs_on"),
        (lambda d: d["steps"][0].update(by_model_family={"dsa": {"requires_approval": True}}), "requires_approval"),
        (
            lambda d: d["steps"][0].update(
                by_model_family={
                    "dsa": {"metrics": ["a"], "gates": [{"metric": "b", "op": "==", "value": 1, "reason": "r"}]}
                }
            ),
            "by_model_family.dsa: gate metric 'b' is not listed in metrics",
        ),
        (
            lambda d: d["steps"][0].update(by_model_family={"dsa": {"command": ["{python}", "{secret}"]}}),
            "unknown placeholder {secret}",
        ),
        (
            lambda d: d["steps"][0].update(
                gates=[{"metric": "m", "op": "eval", "value": 1, "reason": "r"}], metrics=["m"]
            ),
            "op",
        ),
    ],
)
def test_invalid_specs_are_refused(ws, mutate, needle):
    doc = phase(0, "a", [step("s", tool())])
    mutate(doc)
    path = ws.write_phase(doc)
    with pytest.raises(SpecError) as ei:
        load_catalog(ws.phases)
    assert str(path) in ei.value.message and needle in ei.value.message


def test_requires_must_name_an_earlier_phase(ws):
    ws.write_phase(phase(0, "a", [step("s", tool())], requires=5))
    with pytest.raises(SpecError, match="requires: unknown phase id 5"):
        load_catalog(ws.phases)


def test_phases_command_lists_and_shows(ws):
    ws.write_phase(
        phase(
            0,
            "a",
            [
                step(
                    "s",
                    tool("--metric", "m=1"),
                    metrics=["m"],
                    gates=[{"metric": "m", "op": ">=", "value": 1, "reason": "because"}],
                )
            ],
        )
    )
    r = invoke("phases", "a")
    assert r.exit_code == 0, r.output
    assert "0-a" in r.stdout and "gate m >= 1  (because)" in r.stdout
    doc = json.loads(invoke("phases", "--json").stdout)
    assert doc["results"]["phases"][0]["steps"][0]["id"] == "s"


def test_phases_command_shows_what_each_model_family_runs_instead():
    r = invoke("phases", "1", "--phases-dir", str(REPO / "phases"))
    assert r.exit_code == 0, r.output
    base, _, dsa = r.stdout.partition("on model_family dsa")
    assert "verify_tools.parity --json" in base and "gate summary.cases_failed == 0" in base
    assert "verify_tools.dsa_parity --json" in dsa and "gate summary.failed == 0" in dsa
