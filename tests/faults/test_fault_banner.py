"""A login shell that prints a banner ("Welcome to gpu-node-17", from ~/.bashrc) before every command,
sftp included: output is read between per-command markers, so the bundle's hash check, the step's
JSON and the upload all work, and the banner is reported once as a warning (issue 10)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from faultkit import BANNER, Project, add_banner, host, phase_doc

from orchestrator.bundle import ship_bundle, verify_on_host
from orchestrator.transport.ssh import SSHTransport
from tests.support.bundles import make_bundle
from tests.support.sshd_lab import inventory_doc, write_inventory

pytestmark = pytest.mark.ssh


def _bundle(tmp: Path):
    return make_bundle(tmp, "banner")


def test_banner_is_outside_the_frame_and_reported_once(fault_lab, tmp_path, closing):
    lab = fault_lab(1)
    add_banner(lab, "h1", tmp_path)
    t = closing(SSHTransport(host(lab, "h1", tmp_path / "r")))
    doc = {"ok": True, "n": 1}
    first = t.run(["python3", "-c", f"import json; print(json.dumps({doc!r}))"], timeout_s=20)
    assert first.ok and json.loads(first.stdout) == doc and first.stdout == json.dumps(doc) + "\n"
    assert BANNER not in first.stderr and "Last login" not in first.stderr
    assert len(first.warnings) == 1 and BANNER in first.warnings[0] and first.warnings[0].startswith("h1: ")
    second = t.run(["sh", "-c", "printf 'no newline'; exit 3"], timeout_s=20)
    assert (second.exit_code, second.stdout, second.warnings) == (3, "no newline", [])


def test_bundle_ships_and_verifies_on_a_banner_host_without_a_false_repair(fault_lab, tmp_path, closing):
    lab = fault_lab(1)
    add_banner(lab, "h1", tmp_path)
    bundle = _bundle(tmp_path)
    root = tmp_path / "remote"
    h = host(lab, "h1", root)
    t = closing(SSHTransport(h))
    shipped = ship_bundle(t, bundle, h)  # the upload itself falls back from sftp (banner in its stream)
    assert (shipped.found, shipped.uploaded, shipped.verified) == ("absent", True, True)
    assert verify_on_host(t, bundle, h) == "ok"
    again = ship_bundle(t, bundle, h)
    assert (again.found, again.uploaded, again.unpacked) == ("ok", False, False), "no false repair"
    # the warning met by the bundle check (whose result nobody shows) waits for the engine, once
    [warning] = t.drain_warnings()
    assert warning.startswith("h1: the login shell printed") and BANNER in warning
    assert t.drain_warnings() == []
    # host side: exactly the tarball and the tree, no damaged copies, no partial uploads
    names = sorted(p.name for p in (root / "bundles").iterdir())
    assert names == [bundle.sha256, f"{bundle.sha256}.tar.gz"], names
    assert (root / "bundles" / bundle.sha256 / ".sha256").read_text() == bundle.sha256 + "\n"


def test_a_phase_runs_on_a_banner_host_through_the_cli(fault_lab, tmp_path):
    lab = fault_lab(2)
    add_banner(lab, "h1", tmp_path)
    proj = Project(tmp_path, phase_doc())
    remote = tmp_path / "remote"
    inv = write_inventory(tmp_path / "inv.yaml", inventory_doc(lab, remote))
    code, doc = proj.cli("run", "0", "--inventory", str(inv), "--json", "--yes")
    assert code == 0, doc.get("errors")
    banner_warnings = [w for w in doc["warnings"] if BANNER in w]
    assert len(banner_warnings) == 1 and banner_warnings[0].startswith("h1: the login shell printed"), doc["warnings"]
    st = proj.state_doc()
    for n in ("h1", "h2"):
        assert st["phases"]["0"]["hosts"][n]["status"] == "completed"
        ev = st["phases"]["0"]["hosts"][n].get("bundle") or {}
        assert ev.get("repaired") is False and ev.get("verified") is True, ev
        assert not list((remote / n / "bundles").glob("*.damaged.*"))
