"""One bundle per command, hash-checked before every use, recorded in state, shown by the dry-run.

1. the sha in the plan digest / approval is the sha of the bytes shipped; a change to kernels/
   (or to the written tarball) during a run is a StateConflict (exit 6) naming both hashes;
2. the bundle is hash-checked on the host before every step (here with fakes; the real sshd
   lab scenarios are in tests/ssh/test_bundle_engine.py);
3. state.json and ``status`` (human and --json) carry ``hosts[<host>].bundle`` per phase;
4. ``run --dry-run`` and ``plan`` list a ``ship <sha12> -> <remote_root>/bundles/<sha>`` action
   per ssh host without connecting anywhere.
"""

from __future__ import annotations

import json

import pytest
import yaml
from core_helpers import bundle_on_host, cli_offline, invoke, phase, step, tool

SSH_INVENTORY = {
    "defaults": {"connection": "ssh", "known_hosts": "/k", "remote_root": "/srv/o"},
    "hosts": [{"name": "g1", "address": "10.0.0.1"}, {"name": "g2", "address": "10.0.0.2"}],
}


class FakeRemote:
    """Answers every command like a kernel tool; records argv and cwd."""

    def __init__(self, host):
        self.host_name = host.name
        self.calls: list[tuple[list[str], str | None]] = []

    def run(self, argv, *, timeout_s, cwd=None, env=None, log_path=None):
        from orchestrator.transport.base import CommandResult

        self.calls.append((argv, cwd))
        return CommandResult(host=self.host_name, argv=argv, exit_code=0, stdout='{"ok": true, "n": 1}')

    def put(self, local_path, remote_path):  # pragma: no cover - ship_bundle is faked
        raise NotImplementedError

    def close(self):
        pass


def _engine(ws, factory=FakeRemote):
    from orchestrator.engine import Engine
    from orchestrator.inventory import load_inventory
    from orchestrator.specs import load_catalog

    return Engine(
        catalog=load_catalog(ws.phases),
        inventory=load_inventory(ws.inventory),
        state_dir=ws.state,
        transport_factory=factory,
    )


@pytest.fixture
def fake_ship(monkeypatch):
    """ship_bundle / verify_on_host faked: records calls, answers per host from ``verdicts``."""
    import orchestrator.bundle as bundle_mod

    calls: list[tuple[str, str, str]] = []  # (what, host, sha)
    verdicts: dict[str, list[str]] = {}

    def ship_bundle(transport, bundle, host):
        calls.append(("ship", host.name, bundle.sha256))
        first = host.name not in {c[1] for c in calls[:-1] if c[0] == "ship"}
        return bundle_on_host(host, bundle, uploaded=first, found="absent" if first else "unpacked-mismatch")

    def verify_on_host(transport, bundle, host):
        calls.append(("check", host.name, bundle.sha256))
        q = verdicts.get(host.name) or []
        return q.pop(0) if q else "ok"

    monkeypatch.setattr(bundle_mod, "ship_bundle", ship_bundle)
    monkeypatch.setattr(bundle_mod, "verify_on_host", verify_on_host)
    return calls, verdicts


# ----------------------------------------------------------------------------- 1. one bundle per command


def test_the_shipped_tarball_is_the_planned_bundle_even_if_kernels_changes_later(ws):
    from orchestrator.bundle import file_sha256

    ws.inventory.write_text(yaml.safe_dump(SSH_INVENTORY))
    ws.write_phase(phase(0, "a", [step("s", tool())]))
    eng = _engine(ws)
    planned = eng.plan(["0"]).bundle_sha
    assert not (ws.state / "bundles").exists(), "planning writes nothing"
    (ws.checkout / "kernels" / "new.py").write_text("X = 1\n")
    b = eng.shipping_bundle()
    assert b.sha256 == planned == file_sha256(b.path)
    assert b.path == ws.state / "bundles" / f"{planned}.tar.gz"
    assert eng.shipping_bundle() is b  # built once per command
    assert [p.name for p in (ws.state / "bundles").iterdir()] == [f"{planned}.tar.gz"]  # no temp file left


def test_a_kernels_change_between_plan_and_ship_stops_the_run_with_exit_6_naming_both_hashes(ws, fake_ship):
    from orchestrator.bundle import bundle_sha
    from orchestrator.engine import RunOptions
    from orchestrator.errors import ExitCode, StateConflict

    calls, _ = fake_ship
    ws.inventory.write_text(yaml.safe_dump(SSH_INVENTORY))
    ws.write_phase(phase(0, "a", [step("s", tool())]))
    eng = _engine(ws)
    planned = eng.plan(["0"]).bundle_sha
    (ws.checkout / "kernels" / "__init__.py").write_text('"""edited after the plan"""\n')
    now = bundle_sha(ws.checkout)
    assert now != planned
    with pytest.raises(StateConflict) as ei:
        eng.run(["0"], options=RunOptions())
    assert ei.value.exit_code == ExitCode.STATE_CONFLICT == 6
    assert planned in ei.value.message and now in ei.value.message
    assert calls == [], "nothing was shipped"
    assert not (ws.state / "state.json").exists(), "nothing ran, nothing recorded"


def test_shipping_with_a_different_root_is_caught(ws, fake_ship, tmp_path):
    """The shipping path re-packs nothing from elsewhere: pointing the engine at another checkout
    after planning is caught before anything is shipped."""
    from orchestrator.engine import RunOptions
    from orchestrator.errors import StateConflict

    calls, _ = fake_ship
    ws.inventory.write_text(yaml.safe_dump(SSH_INVENTORY))
    ws.write_phase(phase(0, "a", [step("s", tool())]))
    other = tmp_path / "other"
    (other / "kernels").mkdir(parents=True)
    (other / "kernels" / "__init__.py").write_text('"""another checkout"""\n')
    (other / "kernels" / "MANIFEST").write_text("*.py\n")
    eng = _engine(ws)
    planned = eng.bundle_sha
    eng.root = other
    with pytest.raises(StateConflict, match=planned):
        eng.run(["0"], options=RunOptions())
    assert calls == []


def test_a_changed_local_tarball_is_refused_before_it_is_shipped(ws):
    from orchestrator.bundle import file_sha256
    from orchestrator.errors import StateConflict

    ws.inventory.write_text(yaml.safe_dump(SSH_INVENTORY))
    ws.write_phase(phase(0, "a", [step("s", tool())]))
    eng = _engine(ws)
    b = eng.shipping_bundle()
    b.path.write_bytes(b"not the approved bundle")
    with pytest.raises(StateConflict) as ei:
        eng.shipping_bundle()
    assert b.sha256 in ei.value.message and file_sha256(b.path) in ei.value.message


def test_a_kernels_change_made_by_a_running_phase_stops_the_next_phase_via_the_cli(ws):
    """Phase 0 (on this machine) edits kernels/ in the checkout; phase 1 of the same command
    refuses to run with a different bundle: exit 6, both hashes in the one JSON document."""
    target = ws.checkout / "kernels" / "__init__.py"
    edit = [
        "{python}",
        "-c",
        f"import json; open({str(target)!r}, 'a').write('# edited by phase 0\\n'); print(json.dumps(dict(ok=True)))",
    ]
    ws.write_phase(phase(0, "a", [step("edit", edit)]))
    ws.write_phase(phase(1, "b", [step("s", tool())]))
    planned = json.loads(ws.cli("run", "0", "1", "--dry-run", "--json").stdout)["plan"]["bundle_sha"]
    r = ws.cli("run", "0", "1", "--json")
    assert r.returncode == 6, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    [err] = doc["errors"]
    assert err["code"] == "STATE_CONFLICT" and planned in err["message"] and "kernels/" in err["message"]
    from orchestrator.bundle import bundle_sha

    assert bundle_sha(ws.checkout) in err["message"]
    st = ws.state_json()
    assert st["phases"]["0"]["status"] == "completed" and "1" not in st["phases"]


# ----------------------------------------------------------------------------- 2. checked before every use


def test_the_bundle_is_checked_before_every_step_and_a_failed_check_fails_only_that_host(ws, fake_ship):
    from orchestrator.engine import RunOptions

    calls, verdicts = fake_ship
    ws.inventory.write_text(yaml.safe_dump(SSH_INVENTORY))
    ws.write_phase(
        phase(
            0,
            "a",
            [
                step("s", ["{python}", "-m", "kernels.x"], metrics=["n"]),
                step("t", ["{python}", "-m", "kernels.y"]),
                step("u", ["{python}", "-m", "kernels.z"]),
            ],
            failure_policy={"mode": "continue", "max_failed_hosts": None},
        )
    )
    verdicts["g2"] = ["ok", "unpacked-mismatch"]  # g2's tree is edited after step t
    eng = _engine(ws)
    report = eng.run(["0"], options=RunOptions(forks=2))
    assert report.exit_code == 1
    per_host = {h: [c[0] for c in calls if c[1] == h] for h in ("g1", "g2")}
    assert per_host["g1"] == ["ship", "check", "check"]  # ship+check before s, a check before t and u
    assert per_host["g2"] == ["ship", "check", "check"]
    rec = report.phases[0]
    assert rec.hosts["g1"].status.value == "completed"
    assert rec.hosts["g2"].status.value == "failed"
    reason = rec.step("u").hosts["g2"].reason
    assert "failed its hash check on the host before step u" in reason and "unpacked-mismatch" in reason
    ev = rec.hosts["g2"].bundle
    assert ev.verified is False and ev.last_check == "unpacked-mismatch" and ev.checks == 3


def test_a_second_phase_ships_again_and_records_a_repair(ws, fake_ship):
    from orchestrator.engine import RunOptions

    calls, _ = fake_ship
    ws.inventory.write_text(yaml.safe_dump(SSH_INVENTORY))
    ws.write_phase(phase(0, "a", [step("s", tool())]))
    ws.write_phase(phase(1, "b", [step("s", tool())]))
    report = _engine(ws).run(["0", "1"], options=RunOptions())
    assert report.exit_code == 0
    assert [c[0] for c in calls if c[1] == "g1"] == ["ship", "ship"]  # checked (and repaired) before each phase
    p0, p1 = report.phases
    assert p0.hosts["g1"].bundle.uploaded is True and p0.hosts["g1"].bundle.repaired is False
    assert p1.hosts["g1"].bundle.repaired is True and p1.hosts["g1"].bundle.found == "unpacked-mismatch"
    assert any("g1: bundle" in w and "re-unpacked" in w for w in report.warnings)


# ----------------------------------------------------------------------------- 3. evidence in state and status


def test_state_and_status_carry_the_bundle_evidence_per_host(ws, fake_ship):
    from orchestrator.engine import RunOptions

    ws.inventory.write_text(yaml.safe_dump(SSH_INVENTORY))
    ws.write_phase(phase(0, "a", [step("s", tool()), step("t", tool())]))
    eng = _engine(ws)
    sha = eng.bundle_sha
    assert eng.run(["0"], options=RunOptions()).exit_code == 0
    for h in ("g1", "g2"):
        ev = ws.state_json()["phases"]["0"]["hosts"][h]["bundle"]
        assert ev["sha256"] == sha and ev["remote_dir"] == f"/srv/o/bundles/{sha}"
        assert ev["uploaded"] is True and ev["verified"] is True and ev["found"] == "absent"
        assert ev["checks"] == 2 and ev["last_check"] == "ok" and ev["checked_at"]
    r = invoke("status", "--json")
    assert r.exit_code == 0, r.output
    ev = json.loads(r.stdout)["results"]["state"]["phases"]["0"]["hosts"]["g1"]["bundle"]
    assert ev["verified"] is True and ev["uploaded"] is True
    r = invoke("status")
    assert r.exit_code == 0
    text = " ".join(r.stdout.split())
    assert f"bundle {sha[:12]} hash-verified on 2/2 host(s)" in text and "uploaded to g1, g2" in text


def test_a_local_host_in_a_service_changing_phase_records_the_real_ship_and_repair(ws):
    """No fakes: the local transport runs bundle.py's host-side scripts under remote_root."""
    ws.write_phase(phase(0, "live", [step("change", tool(), requires_approval=True, changes="a live change")]))
    digest = json.loads(ws.cli("plan", "0", "--json").stdout)["plan"]["digest"]
    r = ws.cli("run", "0", "--json", "--approve", digest)
    assert r.returncode == 0, r.stdout + r.stderr
    sha = json.loads(r.stdout)["plan"]["bundle_sha"]
    ev = ws.state_json()["phases"]["0"]["hosts"]["local"]["bundle"]
    remote_dir = ws.root / "remote" / "local" / "bundles" / sha
    assert ev["remote_dir"] == str(remote_dir) and ev["uploaded"] is True and ev["verified"] is True
    (remote_dir / "__init__.py").write_text("# edited on the host\n")
    r = ws.cli("run", "0", "--json", "--yes", "--approve", digest)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    ev = doc["results"]["phases"][0]["hosts"]["local"]["bundle"]
    assert ev["repaired"] is True and ev["uploaded"] is False and ev["found"] == "unpacked-mismatch"
    assert ev["verified"] is True
    assert any("failed its hash check" in w and "re-unpacked" in w for w in doc["warnings"])
    assert (remote_dir / "__init__.py").read_text() == '"""test bundle"""\n'
    assert list(remote_dir.parent.glob(f"{sha}.damaged.*")), "the damaged tree is kept aside"


# ----------------------------------------------------------------------------- 4. dry-run shows the ship action


def test_dry_run_lists_the_ship_action_per_ssh_host_and_connects_nowhere(ws):
    ws.inventory.write_text(
        yaml.safe_dump(
            {
                "defaults": {"connection": "ssh", "known_hosts": "/k", "remote_root": "/srv/o"},
                "hosts": [
                    {"name": "g1", "address": "10.0.0.1"},
                    {"name": "g2", "address": "10.0.0.2"},
                    {"name": "here", "connection": "local", "remote_root": str(ws.root / "remote" / "here")},
                ],
            }
        )
    )
    ws.write_phase(phase(0, "a", [step("s", tool())]))
    env = {**__import__("os").environ, **ws.env()}
    for args in (["run", "0", "--dry-run", "--json"], ["plan", "0", "--json"]):
        r = cli_offline(*args, env=env)
        assert "FABRIC False EXIT 0" in r.stderr, r.stderr
        plan = json.loads(r.stdout)["plan"]
        sha = plan["bundle_sha"]
        [ph] = plan["phases"]
        assert ph["bundle"] == [
            {
                "host": h,
                "action": "ship",
                "sha256": sha,
                "remote_dir": f"/srv/o/bundles/{sha}",
                "tarball": f"/srv/o/bundles/{sha}.tar.gz",
                "display": f"ship {sha[:12]} -> /srv/o/bundles/{sha}",
            }
            for h in ("g1", "g2")
        ], "local hosts run in the checkout in a phase that changes no service"
    r = cli_offline("run", "0", "--dry-run", env=env)
    assert "FABRIC False EXIT 0" in r.stderr, r.stderr
    for h in ("g1", "g2"):
        assert f"bundle [{h}] ship {sha[:12]} -> /srv/o/bundles/{sha}" in r.stdout
    assert "[here] ship" not in r.stdout
    assert not (ws.state / "bundles").exists(), "a dry-run writes no tarball"
