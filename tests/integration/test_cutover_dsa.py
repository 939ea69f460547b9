"""The cut-over verbs for the dsa route (issue 14), against the SGLang stand-in: `switch
--model-family dsa` enables the dsa route in verify_backend.json, and the canary passes only
when every rank records that route (route_family dsa), per rank, per captured batch size."""

from __future__ import annotations

import json

import pytest
from cutover_helpers import make_bundle

SHA = "c" * 64


def _cut_over(standin, cutover, family, **control):
    root = standin.root
    make_bundle(root, SHA)
    standin.control(**control)
    standin.restart()
    standin.wait_up()
    cutover("baseline", "--root", str(root), "--generate-url", standin.generate_url)
    rc, doc = cutover("switch", "--root", str(root), "--to", SHA, "--model-family", family)
    assert rc == 0 and doc["model_family"] == family
    cutover("restart", "--restart-json", standin.restart_json, "--health-url", standin.health_url)
    return cutover("canary", "--root", str(root), "--generate-url", standin.generate_url)


def test_switch_writes_the_family_and_set_config_validates_it(standin, cutover):
    root = standin.root
    make_bundle(root, SHA)
    rc, doc = cutover("switch", "--root", str(root), "--to", SHA, "--model-family", "dsa")
    assert rc == 0 and json.loads((root / "verify_backend.json").read_text())["model_family"] == "dsa"
    rc, doc = cutover("switch", "--root", str(root), "--to", SHA)
    assert rc == 0 and doc["config"]["model_family"] == "dense_mla"
    rc, doc = cutover("switch", "--root", str(root), "--to", SHA, "--model-family", "auto")
    assert rc == 2, "auto is resolved by the orchestrator before the switch, never written"
    rc, doc = cutover("set-config", "--root", str(root), "model_family=sparse")
    assert rc == 2 and "model_family must be one of" in doc["error"]
    assert json.loads((root / "verify_backend.json").read_text())["model_family"] == "dense_mla"


def test_a_dsa_host_cut_over_for_dsa_passes_with_every_rank_on_the_dsa_route(standin, cutover):
    rc, doc = _cut_over(standin, cutover, "dsa", tp=2, model_family="dsa")
    assert rc == 0 and doc["ok"], doc["reasons"]
    assert (doc["model_family"], doc["route_family"], doc["kernel_active"]) == ("dsa", "dsa", True)
    assert (doc["ranks_total"], doc["declined_verify_calls"], doc["captured_sizes_not_bundled"]) == (2, 0, 0)
    active = json.loads((standin.root / "active.json").read_text())
    assert active["route"] == "dsa" and active["eager_routed"] == 2 * 8


@pytest.mark.parametrize("served,switched", [("dsa", "dense_mla"), ("dense_mla", "dsa")])
def test_the_wrong_family_is_never_taken_for_the_bundled_kernel(standin, cutover, served, switched):
    rc, doc = _cut_over(standin, cutover, switched, tp=2, model_family=served)
    assert rc == 1 and doc["kernel_active"] is False and doc["route_family"] is None
    assert any(f"the {switched} cut-over needs route" in r for r in doc["reasons"]), doc["reasons"]


def test_a_dsa_rank_whose_largest_graph_replays_sglangs_kernel_fails_the_canary(standin, cutover):
    rc, doc = _cut_over(standin, cutover, "dsa", tp=2, model_family="dsa", capture_on_sglang="bundled")
    assert rc == 1 and doc["kernel_active"] is True and doc["route_family"] == "dsa"
    assert {(c["rank"], c["bs"]) for c in doc["captured_not_bundled"]} == {("tp0", 8), ("tp1", 8)}


def test_dsa_verify_calls_declined_during_the_canary_fail_it(standin, cutover):
    rc, doc = _cut_over(
        standin, cutover, "dsa", tp=2, model_family="dsa", decline_verify="bundled", decline_reason="q_all"
    )
    assert rc == 1 and doc["declined_verify_calls"] == 2 * 8
    assert doc["declined_during_canary"]["tp0"]["reasons"] == {"q_all": 8}
