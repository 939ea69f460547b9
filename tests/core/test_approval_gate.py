"""Approval: only the exact word `yes` or the matching digest approves; otherwise nothing changes."""

from __future__ import annotations

import json

import pytest
from core_helpers import invoke, phase, step, tool


@pytest.fixture
def live(ws):
    """Phase 0 (no approval) and phase 1 whose `switch` step changes the "live service" (a file)."""
    ws.side_effect = ws.root / "live-service-changed"
    ws.write_phase(
        phase(
            0,
            "check",
            [
                step(
                    "c",
                    tool("--metric", "summary.n=3"),
                    metrics=["summary.n"],
                    gates=[{"metric": "summary.n", "op": ">=", "value": 1, "reason": "r"}],
                )
            ],
        )
    )
    ws.write_phase(
        phase(
            1,
            "cutover",
            [
                step("probe", tool()),
                step(
                    "switch",
                    tool("--touch", str(ws.side_effect)),
                    runs_on="canary_then_rest",
                    requires_approval=True,
                    changes="switches the live kernel",
                    rollback="undo",
                ),
            ],
            undo="orchestrator rollback 1",
            rollback_steps=[step("undo", tool("--touch", str(ws.root / "undone")))],
        )
    )
    assert invoke("run", "0").exit_code == 0
    return ws


def plan_digest(*phases: str) -> str:
    r = invoke("plan", *phases, "--json")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)["plan"]["digest"]


def decisions(ws) -> list[dict]:
    """Approval records only (the audit log also holds the engine's step transitions)."""
    return [a for a in ws.audit() if a["via"] in ("prompt", "flag")]


def assert_nothing_changed(ws, before: bytes | None) -> None:
    assert ws.state_bytes() == before
    assert not ws.side_effect.exists()


def test_exact_word_yes_approves_and_is_audited(live):
    r = invoke("run", "1", "--interactive", input="yes\n")
    assert r.exit_code == 0, r.output
    assert live.side_effect.exists()
    assert "Only 'yes' will be accepted" in r.stderr and "switches the live kernel" in r.stderr
    assert "summary.n >= 1 -> 3 (pass)" in r.stderr  # gate evidence from phase 0 with its number
    assert "wave 1 (canary): local" in r.stderr and "to undo: orchestrator rollback 1" in r.stderr
    last = decisions(live)[-1]
    assert last["decision"] == "approved" and last["via"] == "prompt" and last["phase"] == "1-cutover"
    assert last["hosts"] == ["local"] and len(last["digest"]) == 64 and last["user"] and last["time"]


@pytest.mark.parametrize("answer", ["y", "YES", "Yes", "yes please", " yes", "no", ""])
def test_anything_but_yes_refuses_and_changes_nothing(live, answer):
    before = live.state_bytes()
    r = invoke("run", "1", "--interactive", input=answer + "\n")
    assert r.exit_code == 5, r.output
    assert "not approved" in r.stderr
    assert_nothing_changed(live, before)
    assert decisions(live)[-1]["decision"] == "refused"


def test_no_tty_without_approve_exits_5_and_changes_nothing(live):
    before = live.state_bytes()
    r = invoke("run", "1", "--json")
    assert r.exit_code == 5
    doc = json.loads(r.stdout)
    assert doc["errors"][0]["code"] == "NOT_APPROVED" and "--approve" in doc["errors"][0]["message"]
    assert doc["plan"]["digest"]  # what would have been approved is shown
    assert_nothing_changed(live, before)


def test_yes_flag_alone_never_approves_a_live_change(live):
    before = live.state_bytes()
    assert invoke("run", "1", "--yes").exit_code == 5
    assert_nothing_changed(live, before)


def test_matching_digest_approves_without_tty(live):
    digest = plan_digest("1")
    r = invoke("run", "1", "--json", "--approve", digest)
    assert r.exit_code == 0, r.output
    assert live.side_effect.exists()
    # a phase that changes a service also unpacks the bundle under the local host's remote_root
    # (cut-over verbs point `current` at it); its commands still ran in the checkout
    sha = json.loads(r.stdout)["plan"]["bundle_sha"]
    marker = live.root / "remote" / "local" / "bundles" / sha / ".sha256"
    assert marker.read_text().strip() == sha
    assert decisions(live)[-1]["decision"] == "approved" and decisions(live)[-1]["via"] == "flag"


def test_wrong_digest_exits_5_and_changes_nothing(live):
    before = live.state_bytes()
    r = invoke("run", "1", "--json", "--approve", "0" * 64)
    assert r.exit_code == 5
    assert_nothing_changed(live, before)


def test_digest_of_an_older_plan_exits_6_and_changes_nothing(live):
    old = plan_digest("1")
    assert invoke("run", "0", "--yes").exit_code == 0  # new evidence -> a new plan
    # the evidence numbers did not change, so bump the spec to change the plan
    spec = live.phases / "1-cutover.yaml"
    spec.write_text(spec.read_text().replace("switches the live kernel", "switches the live kernel now"))
    assert plan_digest("1") != old
    before = live.state_bytes()
    r = invoke("run", "1", "--json", "--approve", old)
    assert r.exit_code == 6, r.output
    assert "stale" in json.loads(r.stdout)["errors"][0]["message"]
    assert_nothing_changed(live, before)


def test_digest_changes_with_hosts_spec_bundle_evidence(live, tmp_path):
    d1 = plan_digest("1")
    assert plan_digest("1") == d1  # deterministic
    live.hosts(["local", "other"])
    d2 = plan_digest("1")
    assert d2 != d1
    live.hosts(["local"])
    assert plan_digest("1") == d1
    live.write_phase(
        phase(
            0,
            "check",
            [
                step(
                    "c",
                    tool("--metric", "summary.n=4"),
                    metrics=["summary.n"],
                    gates=[{"metric": "summary.n", "op": ">=", "value": 1, "reason": "r"}],
                )
            ],
        )
    )
    assert invoke("run", "0").exit_code == 0
    assert plan_digest("1") != d1  # new gate evidence (n=4)


def test_rollback_needs_its_own_approval(live):
    r = invoke("rollback", "1", "--json")
    assert r.exit_code == 5 and not (live.root / "undone").exists()
    dr = json.loads(invoke("rollback", "1", "--dry-run", "--json").stdout)
    r = invoke("rollback", "1", "--json", "--approve", dr["plan"]["rollback_digest"])
    assert r.exit_code == 0, r.output
    assert (live.root / "undone").exists()
    assert live.state_json()["phases"]["1"]["hosts"]["local"]["reason"].startswith("rolled back")


def test_json_mode_never_prompts(live):
    r = invoke("run", "1", "--json", "--interactive")
    assert r.exit_code == 2 and json.loads(r.stdout)["errors"][0]["code"] == "USAGE"


def test_run_all_with_approve_cannot_carry_over_to_evidence_made_in_the_same_run(live):
    """Approving `run --all` up front does not approve phase 1 after phase 0 produced new evidence."""
    live.write_phase(
        phase(
            0,
            "check",
            [
                step(
                    "c",
                    tool("--metric", "summary.n=5"),
                    metrics=["summary.n"],
                    gates=[{"metric": "summary.n", "op": ">=", "value": 1, "reason": "r"}],
                )
            ],
        )
    )
    digest = plan_digest("--all")
    r = invoke("run", "--all", "--json", "--approve", digest, "--yes")
    assert r.exit_code == 6, r.output
    assert "gate evidence changed during this run" in json.loads(r.stdout)["errors"][0]["message"]
    assert not live.side_effect.exists()
    assert live.state_json()["phases"]["0"]["status"] == "completed"  # phase 0 did run (no approval needed)


def test_interactive_rollback_needs_the_exact_word(live):
    r = invoke("rollback", "1", "--interactive", input="no\n")
    assert r.exit_code == 5 and not (live.root / "undone").exists()
    r = invoke("rollback", "1", "--interactive", input="yes\n")
    assert r.exit_code == 0, r.output
    assert (live.root / "undone").exists()
    assert [a["decision"] for a in decisions(live)[-2:]] == ["refused", "approved"]


def test_no_phase_is_a_usage_error(live):
    assert invoke("run").exit_code == 2


def test_status_shows_approval_steps_awaiting_approval_once_the_predecessor_passed(live):
    r = invoke("status")
    assert r.exit_code == 0
    line = next(l for l in r.stdout.splitlines() if "switch (approval)" in l)
    assert "awaiting_approval" in line


def test_rollback_that_cannot_be_rendered_is_refused_with_3_before_asking(ws):
    ws.write_phase(
        phase(
            0,
            "svc",
            [step("s", tool())],
            rollback_steps=[
                step("undo", ["{python}", "-m", "cutover_agent", "rollback", "--health-url", "{health_url}"])
            ],
        )
    )
    r = invoke("rollback", "0", "--json")
    assert r.exit_code == 3
    assert "service.health_url: needed by phase 0-svc step undo" in json.loads(r.stdout)["errors"][0]["message"]
    assert ws.audit() == []


def test_every_transition_of_a_service_changing_step_is_audited(live):
    digest = plan_digest("1")
    assert invoke("run", "1", "--json", "--approve", digest).exit_code == 0
    steps = [(a["decision"], a.get("step"), a["hosts"]) for a in live.audit() if a["via"] == "engine"]
    assert ("step_started", "switch", ["local"]) in steps and ("step_completed", "switch", ["local"]) in steps
    approved = [a["digest"] for a in live.audit() if a["decision"] == "approved"][-1]
    assert all(a["digest"] == approved for a in live.audit() if a["via"] == "engine")
    dr = json.loads(invoke("rollback", "1", "--dry-run", "--json").stdout)
    assert invoke("rollback", "1", "--json", "--approve", dr["plan"]["rollback_digest"]).exit_code == 0
    assert ("step_completed", "undo", ["local"]) in [(a["decision"], a.get("step"), a["hosts"]) for a in live.audit()]
    # phase 0 changes no service: its steps are in state, not in the audit log
    assert not any(a.get("step") == "c" for a in live.audit())
