"""End to end over real sshd (the lab of tests/support/sshd_lab.py):
the engine ships the bundle once per host, runs the phase's commands there in
``<remote_root>/bundles/<sha>``, reads their JSON and gates it; the dry-run shows the same command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from core_helpers import phase, step

from tests.support.sshd_lab import running_lab

pytestmark = [pytest.mark.ssh, pytest.mark.slow]

PROBE_TOOL = '''"""Shipped test tool: reports where it runs (one JSON document)."""
import json, os, sys
print(json.dumps({"ok": True, "cwd": os.getcwd(), "argv": sys.argv[1:], "answer": 42}))
'''


@pytest.fixture
def lab(tmp_path):
    """The lab's folder: two sshd hosts, ``inventory.yaml``, remote roots ``remote/<host>``."""
    with running_lab(tmp_path / "lab", 2) as running:
        yield Path(running.root)


def test_phase_runs_over_ssh_in_the_shipped_bundle(ws, lab):
    (ws.checkout / "kernels" / "probe_tool.py").write_text(PROBE_TOOL)
    ws.write_phase(
        phase(
            0,
            "remote",
            [
                step(
                    "probe",
                    ["{python}", "-m", "probe_tool", "--host", "{host}"],
                    metrics=["answer", "cwd"],
                    gates=[
                        {"metric": "answer", "op": "==", "value": 42, "reason": "the shipped tool ran"},
                        {"metric": "cwd", "op": "==", "value": "{bundle_dir}", "reason": "runs in the bundle dir"},
                    ],
                ),
            ],
        )
    )
    inv = str(lab / "inventory.yaml")
    dry = json.loads(ws.cli("run", "0", "--dry-run", "--json", "-i", inv).stdout)
    sha = dry["plan"]["bundle_sha"]
    r = ws.cli("run", "0", "--json", "-i", inv, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    res = doc["results"]["phases"][0]["steps"][0]["hosts"]
    assert sorted(res) == ["h1", "h2"]
    for name, hr in res.items():
        assert hr["status"] == "completed", hr
        assert hr["metrics"]["cwd"] == str(lab / "remote" / name / "bundles" / sha)
        planned = next(c for c in dry["plan"]["phases"][0]["steps"][0]["commands"] if c["host"] == name)
        assert hr["command"] == planned["display"]  # the dry-run shows exactly what was sent
