"""The engine's use of the bundle over real sshd hosts (the CLI, as in test_remote_phases.py):

- the bundle is hash-checked on the host before every phase and step; a tree edited on the host
  after a run is repaired (re-unpacked from the verified tarball, damaged copy kept aside) at the
  start of the next phase and the repair is recorded; a tree edited *during* a phase fails that
  host (not the run) before its next step, with the hash-check verdict in the reason;
- state / ``status --json`` carry ``hosts[<host>].bundle`` (sha256, uploaded, verified, remote_dir).
"""

from __future__ import annotations

import json

import pytest
import yaml
from labkit import Project, quick_phase

from tests.support.cli import host_results, step_results
from tests.support.sshd_lab import inventory_doc, write_inventory

pytestmark = pytest.mark.ssh

#: Appends a line to the shipped kernels/hello.py on the host named in argv[1] (h1 only).
EDIT_ON_H1 = (
    "import json,sys,pathlib; p=pathlib.Path('hello.py'); "
    "sys.argv[1]=='h1' and p.write_text(p.read_text()+'# edited on the host\\n'); "
    "print(json.dumps(dict(ok=True)))"
)


def second_phase() -> dict:
    doc = quick_phase()
    doc.update(id=1, name="again", order=1, requires=0, title="The probe again, in the next phase")
    return doc


def test_evidence_then_a_tree_edited_on_the_host_is_repaired_and_recorded_before_the_next_phase(own_lab, tmp_path):
    lab = own_lab(2)
    proj = Project(tmp_path, quick_phase())
    (proj.phases / "1-again.yaml").write_text(yaml.safe_dump(second_phase(), sort_keys=False))
    remote = tmp_path / "remote"
    inv = write_inventory(tmp_path / "inv.yaml", inventory_doc(lab, remote))

    code, first = proj.cli("run", "0", "--inventory", str(inv), "--json")
    assert code == 0, first["errors"]
    sha = first["plan"]["bundle_sha"]
    for h, hp in host_results(first).items():
        ev = hp["bundle"]
        assert ev["sha256"] == sha and ev["remote_dir"] == str(remote / h / "bundles" / sha)
        assert ev["uploaded"] is True and ev["found"] == "absent" and ev["verified"] is True
        assert ev["repaired"] is False and ev["checks"] == 1 and ev["last_check"] == "ok"
    code, status = proj.cli("status", "--json")
    assert code == 0
    st_hosts = status["results"]["state"]["phases"]["0"]["hosts"]
    assert {h: (hp["bundle"]["verified"], hp["bundle"]["uploaded"]) for h, hp in st_hosts.items()} == {
        "h1": (True, True),
        "h2": (True, True),
    }

    edited = remote / "h1" / "bundles" / sha / "hello.py"
    original = edited.read_text()
    edited.write_text(original + "# edited on the host after the upload\n")

    code, nxt = proj.cli("run", "1", "--inventory", str(inv), "--json")
    assert code == 0, nxt["errors"]
    res = host_results(nxt, "1")
    assert res["h1"]["status"] == res["h2"]["status"] == "completed"
    h1, h2 = res["h1"]["bundle"], res["h2"]["bundle"]
    assert h1["found"] == "unpacked-mismatch" and h1["repaired"] is True and h1["uploaded"] is False
    assert h1["verified"] is True
    assert h2["found"] == "ok" and h2["repaired"] is False and h2["uploaded"] is False and h2["verified"] is True
    assert any(
        w.startswith(f"h1: bundle {sha[:12]} failed its hash check") and "re-unpacked" in w for w in nxt["warnings"]
    ), nxt["warnings"]
    assert edited.read_text() == original, "the approved bytes are back"
    [damaged] = (remote / "h1" / "bundles").glob(f"{sha}.damaged.*")
    assert "edited on the host" in (damaged / "hello.py").read_text(), "kept aside, not deleted"
    # the marker the probe read came from the repaired, verified tree
    assert step_results(nxt, "probe")["h1"]["metrics"]["marker"] == sha


def test_a_tree_edited_during_a_phase_fails_that_host_before_its_next_step(own_lab, tmp_path):
    lab = own_lab(2)
    doc = quick_phase()
    doc["steps"].insert(
        0,
        {
            "id": "edit",
            "title": "Edit the shipped tree on h1",
            "runs_on": "each_host",
            "command": ["{python}", "-c", EDIT_ON_H1, "{host}"],
            "timeout_s": 60,
        },
    )
    proj = Project(tmp_path, doc)
    remote = tmp_path / "remote"
    inv = write_inventory(tmp_path / "inv.yaml", inventory_doc(lab, remote))
    code, out = proj.cli("run", "0", "--inventory", str(inv), "--json")
    assert code == 1, out["errors"]
    assert out["results"] is not None, "the run went on for the other host"
    sha = out["plan"]["bundle_sha"]
    res = host_results(out)
    assert res["h2"]["status"] == "completed"
    assert res["h1"]["status"] == "failed"
    probe = step_results(out, "probe")["h1"]
    assert probe["status"] == "failed"
    assert (
        f"h1: bundle {sha[:12]} failed its hash check on the host before step probe of phase 0-quick "
        "(unpacked-mismatch)"
    ) in probe["reason"], probe["reason"]
    assert not (remote / "h1" / "probe").exists(), "the probe never ran on the edited tree"
    ev = res["h1"]["bundle"]
    assert ev["verified"] is False and ev["last_check"] == "unpacked-mismatch" and ev["checks"] == 2
    assert res["h2"]["bundle"]["verified"] is True and res["h2"]["bundle"]["checks"] == 2
    [err] = out["errors"]
    assert err["host"] == "h1" and "failed its hash check" in err["message"]
    state = json.loads((proj.state / "state.json").read_text())
    assert state["phases"]["0"]["hosts"]["h1"]["bundle"]["last_check"] == "unpacked-mismatch"
