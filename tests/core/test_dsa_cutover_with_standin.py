"""Phase 3 for a DSA host (issue 14), driven by the engine against the SGLang STAND-IN of
tests/support: the real switch/restart/canary steps of phases/3-integration.yaml (minus
probe/stage, which need sglang in the service python: tests/integration/test_probe_dsa.py) with
the host's model_family rendered into them. The stand-in serves a model of a given family and
records its TP ranks as the plugin does (tests/support/sglang_standin_ranks.py)."""

from __future__ import annotations

import json
import sys

import pytest
import yaml
from core_helpers import REPO, invoke

from tests.support.net import free_port
from tests.support.paths import copy_kernels
from tests.support.sglang_standin import Standin

pytestmark = pytest.mark.slow


@pytest.fixture
def dsa_host(ws, request):
    """A local host whose inventory says model_family ``request.param[0]`` and whose stand-in
    serves a ``request.param[1]`` model on 2 TP ranks."""
    inventory_family, served = request.param
    copy_kernels(ws.checkout)
    root = ws.root / "remote" / "local"
    root.mkdir(parents=True)
    standin = Standin(root, free_port())
    ws.inventory.write_text(
        yaml.safe_dump(
            {
                "hosts": [
                    {
                        "name": "local",
                        "connection": "local",
                        "remote_root": str(root),
                        "model_family": inventory_family,
                        "service": {
                            "restart": standin.restart_argv,
                            "health_url": standin.health_url,
                            "generate_url": standin.generate_url,
                            "python": sys.executable,
                            "health_timeout_s": 60,
                        },
                    }
                ]
            }
        )
    )
    spec = yaml.safe_load((REPO / "phases" / "3-integration.yaml").read_text())
    spec["requires"] = None
    spec["steps"] = [s for s in spec["steps"] if s["id"] not in ("probe", "stage")]
    canary = next(s for s in spec["steps"] if s["id"] == "canary")
    for g in canary["gates"]:  # the stand-in answers in ~1 ms: the latency ratio is scheduler noise
        if g["metric"] == "latency_ratio":
            g["value"] = 1000
    (ws.phases / "3-integration.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    standin.control(tp=2, model_family=served)
    standin.restart()
    standin.wait_up(30)
    ws.service_root = root
    yield ws
    standin.stop()


def approve_and_run(ws) -> tuple[int, dict]:
    plan = json.loads(invoke("plan", "3", "--json").stdout)["plan"]
    r = invoke("run", "3", "--json", "--approve", plan["digest"])
    return r.exit_code, json.loads(r.stdout)


def results(doc) -> dict[str, dict]:
    return {s["id"]: s["hosts"].get("local") for s in doc["results"]["phases"][0]["steps"]}


@pytest.mark.parametrize("dsa_host", [("dsa", "dsa")], indirect=True)
def test_a_dsa_host_is_cut_over_to_the_dsa_route_on_every_rank(dsa_host):
    code, doc = approve_and_run(dsa_host)
    res = results(doc)
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
    code, doc = approve_and_run(dsa_host)
    res = results(doc)
    assert code == 1 and res["canary"]["status"] == "failed"
    m = res["canary"]["metrics"]
    assert m["kernel_active"] is False and m["route_family"] is None
    assert res["rollback"]["status"] == "completed" and res["rollback"]["metrics"]["healthy"] is True
    cfg = json.loads((dsa_host.service_root / "verify_backend.json").read_text())
    assert cfg["verify_kernel"] == "stock"
