"""Phase 3 for a DSA host (issue 14), driven by the engine against the SGLang STAND-IN of
tests/support: the real switch/restart/canary steps of phases/3-integration.yaml (minus
probe/stage, which need sglang in the service python: tests/integration/test_probe_dsa.py) with
the host's model_family rendered into them. The stand-in serves a model of a given family and
records its TP ranks as the plugin does (tests/support/sglang_standin_ranks.py)."""

from __future__ import annotations

import json

import pytest
from core_helpers import approve_and_run_phase3, phase_results, standin_phase3

pytestmark = pytest.mark.slow


@pytest.fixture
def dsa_host(ws, request):
    """A local host whose inventory says model_family ``request.param[0]`` and whose stand-in
    serves a ``request.param[1]`` model on 2 TP ranks."""
    inventory_family, served = request.param
    standin, root = standin_phase3(ws, model_family=inventory_family)
    standin.control(tp=2, model_family=served)
    standin.restart()
    standin.wait_up(30)
    ws.service_root = root
    yield ws
    standin.stop()


@pytest.mark.parametrize("dsa_host", [("dsa", "dsa")], indirect=True)
def test_a_dsa_host_is_cut_over_to_the_dsa_route_on_every_rank(dsa_host):
    code, doc = approve_and_run_phase3()
    res = phase_results(doc)
    assert code == 0, {k: (v or {}).get("reason") for k, v in res.items()}
    assert res["switch"]["metrics"]["model_family"] == "dsa"
    m = res["canary"]["metrics"]
    assert (m["kernel_active"], m["route_family"], m["ranks_total"], m["ranks_all_active"]) == (True, "dsa", 2, True)
    cfg = json.loads((dsa_host.service_root / "verify_backend.json").read_text())
    assert (cfg["verify_kernel"], cfg["model_family"]) == ("bundled", "dsa")
    active = json.loads((dsa_host.service_root / "active.json").read_text())
    assert active["route"] == "dsa" and sorted(active["ranks"]) == ["tp0", "tp1"]


@pytest.mark.parametrize("dsa_host", [("dense_mla", "dsa"), ("dsa", "dense_mla")], indirect=True)
def test_a_host_whose_inventory_family_is_wrong_fails_the_canary_and_is_rolled_back(dsa_host):
    """The probe catches this first (model_family_derived); without it, the canary still does:
    the route the switch enabled is not the backend SGLang built, so no rank records it."""
    code, doc = approve_and_run_phase3()
    res = phase_results(doc)
    assert code == 1 and res["canary"]["status"] == "failed"
    m = res["canary"]["metrics"]
    assert m["kernel_active"] is False and m["route_family"] is None
    assert res["rollback"]["status"] == "completed" and res["rollback"]["metrics"]["healthy"] is True
    cfg = json.loads((dsa_host.service_root / "verify_backend.json").read_text())
    assert cfg["verify_kernel"] == "stock"
