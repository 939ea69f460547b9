"""Phase 3 end to end: the orchestrator CLI, real sshd hosts (tests/support/sshd_lab.py) and one SGLang
STAND-IN server per host, started by each host's inventory restart command.

The phase is phases/3-integration.yaml with test-only edits: no ``requires`` (phases 0-2 need a
GPU), no probe step (it needs sglang in the service python; tested in test_probe.py), a short
restart health timeout, and waves of one host so "host 2 of 3" is its own wave. The real stage
step runs: each host's service python is its own bare venv (pip only), where the loader lands.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.support import sshd_lab
from tests.support.cli import cli_argv, cli_env, popen_cli, run_cli_json
from tests.support.net import free_port
from tests.support.paths import REPO, copy_kernels
from tests.support.sglang_standin import Standin

pytestmark = [pytest.mark.ssh, pytest.mark.slow]

HOSTS = ["h1", "h2", "h3"]
HEALTH_TIMEOUT_S = "4"


def _phase_spec() -> dict:
    spec = yaml.safe_load((REPO / "phases" / "3-integration.yaml").read_text())
    spec["requires"] = None
    spec["waves"] = [1, 1]
    spec["steps"] = [s for s in spec["steps"] if s["id"] != "probe"]
    for s in spec["steps"] + spec["rollback_steps"]:
        if s["id"] in ("restart", "rollback"):
            s["command"] = s["command"] + ["--health-timeout", HEALTH_TIMEOUT_S]
    return spec


class Fleet:
    """Three lab hosts, a stand-in per host, a frozen checkout, phases dir and state dir."""

    def __init__(self, tmp: Path, lab) -> None:
        self.tmp, self.lab = tmp, lab
        self.checkout = tmp / "checkout"
        copy_kernels(self.checkout)
        self.phases = tmp / "phases"
        self.phases.mkdir()
        (self.phases / "3-integration.yaml").write_text(yaml.safe_dump(_phase_spec(), sort_keys=False))
        self.state = tmp / "state"
        remote = tmp / "remote"
        doc = sshd_lab.inventory_doc(lab, remote, connect_timeout_s=5)
        self.standins: dict[str, Standin] = {}
        self.service_pythons: dict[str, Path] = {}
        for h in doc["hosts"]:
            root = Path(h["remote_root"])
            root.mkdir(parents=True)
            s = Standin(root, free_port())
            self.standins[h["name"]] = s
            venv = tmp / "service-venvs" / h["name"]
            subprocess.run(
                [sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)],
                check=True,
                timeout=120,
            )
            self.service_pythons[h["name"]] = venv / "bin" / "python"
            h["service"] = {
                "restart": s.restart_argv,
                "health_url": s.health_url,
                "generate_url": s.generate_url,
                "python": str(venv / "bin" / "python"),
                "health_timeout_s": 10,
            }
        self.inventory = tmp / "inventory.yaml"
        self.inventory.write_text(yaml.safe_dump(doc, sort_keys=False))
        for s in self.standins.values():
            s.restart()
        for s in self.standins.values():
            s.wait_up()

    def env(self) -> dict[str, str]:
        return cli_env(self.checkout, self.phases)

    def argv(self, *args: str) -> list[str]:
        return cli_argv(*args, "--inventory", str(self.inventory), "--state-dir", str(self.state))

    def cli(self, *args: str, timeout: float = 300) -> tuple[int, dict]:
        return run_cli_json(self.argv(*args), env=self.env(), cwd=self.tmp, timeout=timeout)

    def digest(self, *cmd: str) -> str:
        code, doc = self.cli(*cmd, "--json")
        assert code == 0, doc
        plan = doc.get("plan") or {}
        return plan.get("rollback_digest") or plan["digest"]

    def approve_run(self) -> tuple[int, dict]:
        return self.cli("run", "3", "--json", "--approve", self.digest("plan", "3"))

    # what each host looks like from the outside
    def snapshot(self, name: str) -> dict:
        s = self.standins[name]
        root = s.root
        cfg = root / "verify_backend.json"
        with urllib.request.urlopen(s.health_url, timeout=5) as r:
            health = json.loads(r.read())
        return {
            "current": os.readlink(root / "current") if (root / "current").is_symlink() else None,
            "config": json.loads(cfg.read_text()) if cfg.exists() else None,
            "backend": health["verify_backend"],
            "pid": health["pid"],
            "baseline": (root / "baseline.json").exists(),
        }

    def audit(self) -> list[dict]:
        path = self.state / "audit.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def stop(self) -> None:
        for s in self.standins.values():
            s.stop()


@pytest.fixture
def fleet(tmp_path):
    with sshd_lab.running_lab(tmp_path / "lab", 3) as lab:
        f = Fleet(tmp_path, lab)
        try:
            yield f
        finally:
            f.stop()


def _steps(doc: dict) -> dict[str, dict]:
    [rec] = [p for p in doc["results"]["phases"] if str(p["id"]) == "3"]
    return {s["id"]: s["hosts"] for s in rec["steps"]}


def _host_status(doc: dict) -> dict[str, str]:
    [rec] = [p for p in doc["results"]["phases"] if str(p["id"]) == "3"]
    return {h: r["status"] for h, r in rec["hosts"].items()}


def test_refused_approval_leaves_every_host_unchanged(fleet):
    before = {h: fleet.snapshot(h) for h in HOSTS}
    code, doc = fleet.cli("run", "3", "--json", "--approve", "0" * 64)
    assert code == 5, doc
    assert {h: fleet.snapshot(h) for h in HOSTS} == before, "a refused approval must change nothing"
    assert all(not before[h]["baseline"] and before[h]["current"] is None for h in HOSTS)
    assert [a["decision"] for a in fleet.audit()][-1] == "refused"


def test_approved_cutover_goes_canary_first_then_the_rest(fleet):
    before = {h: fleet.snapshot(h) for h in HOSTS}
    code, doc = fleet.approve_run()
    steps = _steps(doc)
    assert code == 0, {h: (steps["canary"][h] or {}).get("reason") for h in HOSTS}
    sha = doc["plan"]["bundle_sha"]
    for h in HOSTS:
        snap = fleet.snapshot(h)
        assert snap["current"] == f"bundles/{sha}" and snap["config"]["verify_kernel"] == "bundled"
        assert snap["backend"] == "bundled" and snap["pid"] != before[h]["pid"], f"{h} was not restarted"
        assert steps["canary"][h]["metrics"]["outputs_identical"] is True
        active = json.loads((fleet.standins[h].root / "active.json").read_text())
        assert (active["verify_kernel"], active["bundle_sha"], active["pid"]) == ("bundled", sha, snap["pid"])
    for h in HOSTS:  # the stage step put the loader into each host's service python
        assert steps["stage"][h]["status"] == "completed"
        out = subprocess.run(
            [str(fleet.service_pythons[h]), "-c", "import mla_verify_loader as m; print(m.find_root())"],
            capture_output=True,
            text=True,
            timeout=60,
            env={"PATH": "/usr/bin:/bin"},
        )
        assert out.stdout.strip() == str(fleet.standins[h].root), out.stderr
    # canary host first: h1's canary finished before h2 was switched; h2 before h3 (waves of 1)
    assert steps["canary"]["h1"]["finished_at"] <= steps["switch"]["h2"]["started_at"]
    assert steps["canary"]["h2"]["finished_at"] <= steps["switch"]["h3"]["started_at"]
    state = json.loads((fleet.state / "state.json").read_text())
    assert {h: r["status"] for h, r in state["phases"]["3"]["hosts"].items()} == dict.fromkeys(HOSTS, "completed")
    recorded = {s["id"]: s["hosts"] for s in state["phases"]["3"]["steps"]}
    for step, metric in (
        ("baseline", "prompts"),
        ("switch", "current"),
        ("restart", "healthy"),
        ("canary", "outputs_identical"),
    ):
        for h in HOSTS:
            rec = recorded[step][h]
            assert rec["status"] == "completed" and metric in rec["metrics"], (step, h, rec)
            assert rec["started_at"] <= rec["finished_at"] and Path(rec["log_path"]).is_file()
    audit = fleet.audit()
    assert any(a["decision"] == "approved" and sorted(a.get("hosts", [])) == HOSTS for a in audit), audit


def test_every_cutover_transition_is_in_the_audit_log(fleet):
    fleet.standins["h2"].control(fail_health="bundled")
    code, _ = fleet.approve_run()
    assert code == 1
    events = [(a["hosts"][0], a.get("step"), a["decision"]) for a in fleet.audit() if a.get("step") and a.get("hosts")]
    expected = [
        ("h1", "switch", "step_started"),
        ("h1", "switch", "step_completed"),
        ("h1", "restart", "step_started"),
        ("h1", "restart", "step_completed"),
        ("h1", "canary", "step_started"),
        ("h1", "canary", "step_completed"),
        ("h2", "switch", "step_started"),
        ("h2", "switch", "step_completed"),
        ("h2", "restart", "step_started"),
        ("h2", "restart", "step_failed"),
        ("h2", "rollback", "step_started"),
        ("h2", "rollback", "step_completed"),
    ]
    service_changing = [e for e in events if e[1] in ("switch", "restart", "canary", "rollback")]
    assert service_changing == expected, service_changing
    assert ("h3", "baseline", "step_completed") in events  # read-only; h3 was never switched


def test_canary_output_mismatch_rolls_back_the_canary_and_leaves_the_others_untouched(fleet):
    fleet.standins["h1"].control(change_outputs="bundled")
    before = {h: fleet.snapshot(h) for h in HOSTS}
    code, doc = fleet.approve_run()
    assert code == 1
    steps = _steps(doc)
    assert steps["canary"]["h1"]["status"] == "failed"
    assert steps["canary"]["h1"]["metrics"]["outputs_identical"] is False
    assert steps["rollback"]["h1"]["status"] == "completed"
    h1 = fleet.snapshot("h1")
    assert h1["backend"] == "stock" and h1["config"]["verify_kernel"] == "stock" and h1["current"] is None
    for h in ("h2", "h3"):
        snap = fleet.snapshot(h)
        assert (snap["current"], snap["config"], snap["backend"], snap["pid"]) == (
            None,
            None,
            "stock",
            before[h]["pid"],
        ), f"{h} was touched"
        assert _host_status(doc)[h] == "skipped"


def test_health_timeout_on_host_2_rolls_back_host_2_and_halts(fleet):
    fleet.standins["h2"].control(fail_health="bundled")
    before = {h: fleet.snapshot(h) for h in HOSTS}
    code, doc = fleet.approve_run()
    assert code == 1
    steps = _steps(doc)
    sha = doc["plan"]["bundle_sha"]
    status = _host_status(doc)
    assert status["h1"] == "completed" and status["h2"] == "failed" and status["h3"] == "skipped"
    assert steps["restart"]["h2"]["metrics"]["healthy"] is False
    assert steps["rollback"]["h2"]["status"] == "completed"
    h1, h2, h3 = (fleet.snapshot(h) for h in HOSTS)
    assert h1["backend"] == "bundled" and h1["current"] == f"bundles/{sha}"
    assert h2["backend"] == "stock" and h2["config"]["verify_kernel"] == "stock" and h2["current"] is None
    assert (h3["current"], h3["config"], h3["pid"]) == (None, None, before["h3"]["pid"])


def test_orchestrator_rollback_restores_every_host(fleet):
    code, doc = fleet.approve_run()
    assert code == 0
    code, doc = fleet.cli("rollback", "3", "--json", "--approve", fleet.digest("rollback", "3", "--dry-run"))
    assert code == 0, doc
    for h in HOSTS:
        snap = fleet.snapshot(h)
        assert snap["backend"] == "stock" and snap["config"]["verify_kernel"] == "stock" and snap["current"] is None
    assert any(a["decision"] == "approved" and "rollback" in json.dumps(a) for a in fleet.audit())


def _kill_after_host_2_switch(fleet) -> dict:
    """Start an approved run, SIGKILL the whole orchestrator once h2's `current` exists."""
    for s in fleet.standins.values():
        s.control(startup_delay_s=1.5)  # slow restarts so the kill lands inside the rollout
    digest = fleet.digest("plan", "3")
    proc = popen_cli(
        fleet.argv("run", "3", "--json", "--approve", digest), env=fleet.env(), cwd=fleet.tmp, start_new_session=True
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # kill once host 2 has been switched
        if (fleet.standins["h2"].root / "current").is_symlink():
            break
        if proc.poll() is not None:
            pytest.fail(f"the run ended before the kill: {proc.communicate()}")
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    mid = {h: fleet.snapshot(h) for h in HOSTS}
    assert mid["h2"]["current"] is not None, "the kill was meant to land after host 2's switch"
    state = json.loads((fleet.state / "state.json").read_text())
    assert state["phases"]["3"]["hosts"]["h2"]["status"] != "completed", "state must not claim h2 is done"
    return mid


def test_sigkill_mid_cutover_then_a_rerun_converges_with_no_host_half_switched(fleet):
    _kill_after_host_2_switch(fleet)
    code, doc = fleet.cli("run", "3", "--json", "--approve", fleet.digest("plan", "3"))
    steps = _steps(doc)
    assert code == 0, {h: (r or {}).get("reason") for h, r in steps["canary"].items()}
    sha_seen = doc["plan"]["bundle_sha"]
    for h in HOSTS:
        snap = fleet.snapshot(h)
        assert snap["current"] == f"bundles/{sha_seen}" and snap["config"]["bundle_sha"] == sha_seen
        assert snap["backend"] == "bundled", f"{h}: switched on disk but the service runs {snap['backend']}"
        baseline = json.loads((fleet.standins[h].root / "baseline.json").read_text())
        assert baseline["for_sha"] == sha_seen and baseline["config"].get("verify_kernel") != "bundled", (
            f"{h}: the baseline must have been recorded on the stock kernel"
        )


def test_sigkill_mid_cutover_then_orchestrator_rollback_restores_every_host(fleet):
    _kill_after_host_2_switch(fleet)
    code, doc = fleet.cli("rollback", "3", "--json", "--approve", fleet.digest("rollback", "3", "--dry-run"))
    assert code == 0, doc
    for h in HOSTS:
        snap = fleet.snapshot(h)
        assert snap["current"] is None and snap["backend"] == "stock", h
        # h3 was never switched, so rollback left it as it was (no config at all)
        assert (snap["config"] or {}).get("verify_kernel", "stock") == "stock", h
    assert fleet.snapshot("h3")["config"] is None


def test_a_canary_latency_regression_beyond_the_spec_bound_rolls_back(fleet):
    fleet.standins["h1"].control(extra_latency="bundled", extra_latency_ms=60)  # ~20 ms -> ~80 ms
    code, doc = fleet.approve_run()
    assert code == 1
    canary = _steps(doc)["canary"]["h1"]
    assert canary["status"] == "failed" and canary["metrics"]["outputs_identical"] is True
    bound = next(g for g in _phase_spec()["steps"][-1]["gates"] if g["metric"] == "latency_ratio")["value"]
    assert canary["metrics"]["latency_ratio"] > bound
    assert fleet.snapshot("h1")["backend"] == "stock"
    assert _host_status(doc)["h2"] == _host_status(doc)["h3"] == "skipped"
