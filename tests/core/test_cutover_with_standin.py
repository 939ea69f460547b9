"""The real phase-3 cut-over steps (phases/3-integration.yaml, minus probe/stage which install into
the service python) driven by the engine against the SGLang STAND-IN server of tests/support:
approve, switch, restart, canary; and, when the new kernel changes outputs, automatic rollback."""

from __future__ import annotations

import json

import pytest
from core_helpers import approve_and_run_phase3, invoke, phase_results, standin_phase3

pytestmark = pytest.mark.slow


@pytest.fixture
def service(ws):
    standin, root = standin_phase3(ws)
    standin.restart()
    standin.wait_up(30)
    ws.service_root = root
    yield ws
    standin.stop()


def test_cutover_completes_and_points_current_at_the_bundle(service):
    code, doc = approve_and_run_phase3()
    res = phase_results(doc)
    assert code == 0, {k: (v or {}).get("reason") for k, v in res.items()}
    sha = doc["plan"]["bundle_sha"]
    assert res["switch"]["metrics"]["current"] == sha
    assert res["restart"]["metrics"]["healthy"] is True
    assert res["canary"]["metrics"]["outputs_identical"] is True
    assert res["rollback"] is None  # nothing failed, nothing rolled back
    cfg = json.loads((service.service_root / "verify_backend.json").read_text())
    assert cfg["verify_kernel"] == "bundled" and cfg["bundle_sha"] == sha


def test_wrong_outputs_on_the_canary_roll_the_host_back(service):
    (service.service_root / "standin_control.json").write_text(json.dumps({"change_outputs": "bundled"}))
    code, doc = approve_and_run_phase3()
    res = phase_results(doc)
    assert code == 1
    assert res["canary"]["status"] == "failed" and res["canary"]["metrics"]["outputs_identical"] is False
    assert res["rollback"]["status"] == "completed" and res["rollback"]["metrics"]["healthy"] is True
    cfg = json.loads((service.service_root / "verify_backend.json").read_text())
    assert cfg["verify_kernel"] == "stock"
    assert doc["results"]["phases"][0]["hosts"]["local"]["status"] == "failed"


def _action(ws) -> dict:
    return json.loads(invoke("plan", "3", "--json").stdout)["plan"]["phases"][0]["actions"][0]


def test_a_rolled_back_canary_resumes_from_switch_and_passes_on_the_bundled_kernel(service):
    """Issue 10: after an automatic rollback the re-run switches again (it never skips the undone switch)."""
    control = service.service_root / "standin_control.json"
    control.write_text(json.dumps({"change_outputs": "bundled"}))
    assert approve_and_run_phase3()[0] == 1
    a = _action(service)
    assert (a["action"], a["from_step"]) == ("resume", "switch"), a
    control.write_text(json.dumps({}))
    code, doc = approve_and_run_phase3()
    res = phase_results(doc)
    assert code == 0, {k: (v or {}).get("reason") for k, v in res.items()}
    assert res["switch"]["metrics"]["current"] == doc["plan"]["bundle_sha"]
    assert res["canary"]["metrics"]["kernel_active"] is True


def test_ctrl_c_during_restart_then_a_rerun_passes_the_canary_without_a_manual_rollback(service):
    """Issue 10's walk: SIGINT while the service restarts, then the same command again."""
    import signal
    import time

    (service.service_root / "standin_control.json").write_text(json.dumps({"startup_delay_s": 4}))
    digest = json.loads(invoke("plan", "3", "--json").stdout)["plan"]["digest"]
    proc = service.popen("run", "3", "--json", "--approve", digest)
    end = time.monotonic() + 120
    while True:
        assert time.monotonic() < end and proc.poll() is None, proc.communicate()
        try:
            st = service.state_json()
            steps = {s["id"]: s["hosts"].get("local", {}).get("status") for s in st["phases"]["3"]["steps"]}
        except (FileNotFoundError, KeyError, ValueError):
            steps = {}
        if steps.get("restart") == "in_progress":
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert service.state_json()["phases"]["3"]["hosts"]["local"]["status"] == "interrupted"
    a = _action(service)
    # the restart was killed (resume from restart) or had just ended (resume from canary); never
    # from the start, never past a step that did not complete
    assert a["action"] == "resume" and a["from_step"] in ("restart", "canary"), a
    (service.service_root / "standin_control.json").write_text(json.dumps({}))
    code, doc = approve_and_run_phase3()
    res = phase_results(doc)
    assert code == 0, {k: (v or {}).get("reason") for k, v in res.items()}
    assert res["canary"]["metrics"]["kernel_active"] is True and res["rollback"] is None
