"""Scenarios through the real CLI (``python -m orchestrator``) against real sshd hosts.

Each scenario starts its own lab (stopped by PID at teardown) and runs the CLI in a
subprocess with its own state dir. Fast scenarios use a generated phase spec and a tiny
``kernels/`` (``ORCHESTRATOR_ROOT``); the end-to-end one runs the real ``phases/0``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from labkit import Project, SilentServer, make_host, quick_phase

from orchestrator.bundle import Bundle, verify_on_host
from orchestrator.transport.ssh import SSHTransport
from tests.support.cli import host_results, step_results
from tests.support.sshd_lab import inventory_doc, pids_with, write_inventory

pytestmark = pytest.mark.ssh


def tarball_inodes(doc: dict, remote: Path, hosts: list[str]) -> dict[str, int]:
    sha = doc["plan"]["bundle_sha"]
    return {h: os.stat(remote / h / "bundles" / f"{sha}.tar.gz").st_ino for h in hosts}


# ---------------------------------------------------------------------------- scenarios


def test_phase0_on_three_hosts_end_to_end(own_lab, tmp_path):
    if shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists():
        pytest.skip("nvcc not installed: phase 0's build step would be blocked, not completed")
    lab = own_lab(3)
    proj = Project(tmp_path, None)
    remote = tmp_path / "remote"
    inv_doc = inventory_doc(lab, remote)
    inv = write_inventory(tmp_path / "inventory.yaml", inv_doc)
    names = ["h1", "h2", "h3"]

    code, doc = proj.cli("run", "0", "--inventory", str(inv), "--json")
    assert code == 0, doc["errors"]
    sha = doc["plan"]["bundle_sha"]
    assert {h: r["status"] for h, r in host_results(doc).items()} == dict.fromkeys(names, "completed")
    facts = step_results(doc, "facts")
    build = step_results(doc, "build")
    for h in names:
        assert facts[h]["status"] == "completed" and facts[h]["metrics"], facts[h]
        assert build[h]["metrics"]["summary.arch"] == "sm_120a"
        gates = {g["metric"] for g in build[h]["gates"]}
        assert all(g["passed"] for g in build[h]["gates"])
        assert gates == {"summary.spill_bytes", "summary.dsa_spill_bytes", "summary.arch"}, gates
        # the build step's 900 s, capped by the hosts' command_timeout_s
        limit = min(900, inv_doc["defaults"]["command_timeout_s"])
        assert build[h]["command"].startswith(f"cd {remote / h / 'bundles' / sha} && timeout -k 10 {limit:g} ")
        assert Path(build[h]["log_path"]).is_file()
        assert (remote / h / "bundles" / sha / ".sha256").read_text() == sha + "\n"
    state = json.loads((proj.state / "state.json").read_text())
    assert {h: r["status"] for h, r in state["phases"]["0"]["hosts"].items()} == dict.fromkeys(names, "completed")
    assert state["phases"]["0"]["bundle_sha"] == sha
    # the bundle verifies on each host, checked independently of the run
    bundle = Bundle(sha256=sha, path=proj.state / "bundles" / f"{sha}.tar.gz", files=0, size_bytes=0)
    for h in names:
        with SSHTransport(make_host(lab, h, tmp_path, remote_root=str(remote / h))) as t:
            assert verify_on_host(t, bundle, t.host) == "ok"
    code, status = proj.cli("status", "--json")
    assert code == 0 and json.dumps(status).count('"completed"') >= 3

    # phase 1 now runs over SSH with the host's python; without a GPU it is blocked, never completed
    code, doc1 = proj.cli("run", "1", "--inventory", str(inv), "--json")
    res1 = host_results(doc1, "1")
    if any(facts[h]["metrics"].get("torch.cuda_available") for h in names):
        assert all(r["status"] != "blocked" for r in res1.values()), res1
    else:
        assert code == 1
        for h in names:
            assert res1[h]["status"] == "blocked" and "CUDA" in res1[h]["reason"], res1[h]


def test_a_second_run_skips_the_upload_but_runs_the_phase_again(own_lab, tmp_path):
    lab = own_lab(3)
    proj = Project(tmp_path, quick_phase())
    remote = tmp_path / "remote"
    inv = write_inventory(tmp_path / "inv.yaml", inventory_doc(lab, remote))
    names = ["h1", "h2", "h3"]
    code, first = proj.cli("run", "0", "--inventory", str(inv), "--json")
    assert code == 0, first["errors"]
    inodes = tarball_inodes(first, remote, names)
    code, again = proj.cli("run", "0", "--inventory", str(inv), "--json", "--yes")
    assert code == 0, again["errors"]
    assert again["run_id"] != first["run_id"]
    probe1, probe2 = step_results(first, "probe"), step_results(again, "probe")
    for h in names:
        assert probe2[h]["status"] == "completed"
        assert probe2[h]["started_at"] > probe1[h]["finished_at"], "the phase ran again"
    assert tarball_inodes(again, remote, names) == inodes, "the tarball was uploaded again"


def test_a_host_with_a_changed_key_is_refused_and_the_others_complete(own_lab, tmp_path):
    lab = own_lab(3)
    proj = Project(tmp_path, quick_phase(policy={"mode": "continue", "max_failed_hosts": None}))
    kh = lab.write_known_hosts(tmp_path / "known_hosts", wrong_key_for={"h2"})
    inv = write_inventory(tmp_path / "inv.yaml", inventory_doc(lab, tmp_path / "remote", known_hosts=str(kh)))
    code, doc = proj.cli("run", "0", "--inventory", str(inv), "--json")
    res = host_results(doc)
    assert res["h1"]["status"] == res["h3"]["status"] == "completed"
    assert res["h2"]["status"] == "failed"
    h2 = lab.host("h2")
    assert f"h2: host key for {h2.address}:{h2.port} does not match known_hosts {kh}" in res["h2"]["reason"]
    assert not (tmp_path / "remote" / "h2").exists(), "nothing was sent to the refused host"
    [err] = [e for e in doc["errors"] if e["host"] == "h2"]
    assert code == 4 and err["exit_code"] == 4, (code, err)


def test_fail_fast_stops_the_other_hosts_after_a_refused_host(own_lab, tmp_path):
    lab = own_lab(3)
    proj = Project(tmp_path, quick_phase(policy={"mode": "fail_fast"}))
    kh = lab.write_known_hosts(tmp_path / "known_hosts", wrong_key_for={"h1"})
    inv = write_inventory(tmp_path / "inv.yaml", inventory_doc(lab, tmp_path / "remote", known_hosts=str(kh)))
    code, doc = proj.cli("run", "0", "--inventory", str(inv), "--json", "--forks", "1")
    res = host_results(doc)
    assert code != 0
    assert res["h1"]["status"] == "failed" and "does not match known_hosts" in res["h1"]["reason"]
    probe = step_results(doc, "probe")
    assert probe["h2"]["status"] == probe["h3"]["status"] == "skipped"
    assert not (tmp_path / "remote" / "h2" / "probe").exists()


def test_a_host_killed_mid_step_is_lost_and_the_others_complete(own_lab, tmp_path):
    lab = own_lab(3)
    proj = Project(tmp_path, quick_phase(sleep_s=4))
    remote = tmp_path / "remote"
    inv = write_inventory(tmp_path / "inv.yaml", inventory_doc(lab, remote))
    proc = proj.popen("run", "0", "--inventory", str(inv), "--json")
    try:
        deadline = time.monotonic() + 60
        while not (remote / "h2" / "probe" / "started").exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the step never started on h2"
            time.sleep(0.05)
        step_pid = int((remote / "h2" / "probe" / "started").read_text())
        killed = lab.kill_host("h2")
        assert step_pid in killed, "the step's process is a descendant of h2's sshd"
        out, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    doc = json.loads(out)
    res = host_results(doc)
    assert res["h1"]["status"] == res["h3"]["status"] == "completed"
    assert res["h2"]["status"] == "failed"
    assert "connection to the host was lost" in step_results(doc, "probe")["h2"]["reason"]
    assert proc.returncode == 1


def test_a_host_that_accepts_tcp_but_never_speaks_times_out_within_the_bound(own_lab, tmp_path):
    lab = own_lab(2)
    silent = SilentServer()
    try:
        proj = Project(tmp_path, quick_phase())
        doc = inventory_doc(lab, tmp_path / "remote", connect_timeout_s=2)
        doc["hosts"].append(
            {
                "name": "wedged",
                "address": silent.address,
                "port": silent.port,
                "remote_root": str(tmp_path / "remote" / "wedged"),
            }
        )
        inv = write_inventory(tmp_path / "inv.yaml", doc)
        with open(lab.known_hosts, "a") as fh:  # known, so only the silence can fail it
            fh.write(f"[{silent.address}]:{silent.port} {lab.host('h1').host_pubkey}\n")
        started = time.monotonic()
        code, out = proj.cli("run", "0", "--inventory", str(inv), "--json")
        elapsed = time.monotonic() - started
    finally:
        silent.close()
    res = host_results(out)
    assert res["h1"]["status"] == res["h2"]["status"] == "completed"
    assert res["wedged"]["status"] == "failed"
    assert "accepted TCP but sent no SSH banner within 2s" in res["wedged"]["reason"]
    assert silent.accepted, "the client did reach the silent server"
    # bound: the 2 s connect timeout plus the other hosts' work, far below paramiko's defaults
    assert elapsed < 2 + 25, elapsed
    assert code != 0


HOSTILE = [
    ("hosts", "name", "h1; touch {c}"),
    ("hosts", "address", "$(touch {c})"),
    ("defaults", "user", "`touch {c}`"),
    ("hosts", "remote_root", "/tmp/x\ntouch {c}"),
    ("hosts", "remote_root", "/tmp/dir with spaces"),
    ("defaults", "python", "python3; touch {c}"),
    ("defaults", "ssh_key", "$(touch {c})"),
    ("hosts", "port", "22; touch {c}"),
]


@pytest.mark.parametrize("section,field,value", HOSTILE, ids=[f"{s}.{f}:{v[:12]!r}" for s, f, v in HOSTILE])
def test_hostile_inventory_values_are_rejected_and_nothing_runs(shared_lab, tmp_path, section, field, value):
    canary = tmp_path / "canary"
    proj = Project(tmp_path, quick_phase())
    doc = inventory_doc(shared_lab, tmp_path / "remote")
    target = doc["defaults"] if section == "defaults" else doc["hosts"][0]
    target[field] = value.format(c=canary)
    inv = write_inventory(tmp_path / "hostile.yaml", doc)
    code, out = proj.cli("run", "0", "--inventory", str(inv), "--json")
    assert code == 3, out
    [err] = out["errors"]
    assert err["message"].startswith(str(inv)) and field in err["message"], err["message"]
    assert not canary.exists()
    assert not (tmp_path / "remote").exists(), "no host was contacted"
    assert not (proj.state / "state.json").exists()


def test_dry_run_prints_exactly_the_string_the_transport_sends(shared_lab, tmp_path):
    proj = Project(tmp_path, quick_phase())
    remote = tmp_path / "remote"
    inv = write_inventory(tmp_path / "inv.yaml", inventory_doc(shared_lab, remote))
    code, doc = proj.cli("run", "0", "--inventory", str(inv), "--json", "--dry-run")
    assert code == 0
    [phase] = doc["plan"]["phases"]
    [step] = phase["steps"]
    sha = doc["plan"]["bundle_sha"]
    for cmd in step["commands"]:
        t = SSHTransport(make_host(shared_lab, cmd["host"], tmp_path, remote_root=str(remote / cmd["host"])))
        assert cmd["cwd"] == str(remote / cmd["host"] / "bundles" / sha)
        assert cmd["display"] == t.render(cmd["argv"], timeout_s=cmd["timeout_s"], cwd=cmd["cwd"])
    assert not remote.exists(), "a dry-run connects to nothing"


def test_a_dry_run_never_imports_fabric_or_paramiko(tmp_path):
    proj = Project(tmp_path, quick_phase())
    inv = write_inventory(
        tmp_path / "inv.yaml",
        {
            "defaults": {"connection": "ssh", "known_hosts": "/nonexistent/known_hosts", "user": "deploy"},
            "hosts": [{"name": f"gpu-{i}", "address": f"10.0.0.{i + 1}"} for i in range(5)],
        },
    )
    code = (
        "import sys\nfrom orchestrator.cli import main\n"
        "try:\n    main(sys.argv[1:])\nexcept SystemExit as e:\n    rc = e.code\n"
        "print('\\nIMPORTED', rc, sorted(m for m in ('fabric', 'paramiko', 'invoke') if m in sys.modules))"
    )
    p = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            "run",
            "0",
            "--dry-run",
            "--json",
            "--inventory",
            str(inv),
            "--state-dir",
            str(proj.state),
        ],
        env=proj.env(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.stdout.strip().splitlines()[-1] == "IMPORTED 0 []", p.stdout[-500:] + p.stderr[-500:]


def test_a_host_that_refuses_the_bundle_fails_alone(own_lab, tmp_path):
    lab = own_lab(2)
    proj = Project(tmp_path, quick_phase())
    doc = inventory_doc(lab, tmp_path / "remote")
    doc["hosts"][1]["remote_root"] = "/proc/not-writable"
    inv = write_inventory(tmp_path / "inv.yaml", doc)
    code, out = proj.cli("run", "0", "--inventory", str(inv), "--json")
    assert out["results"] is not None, f"the run aborted: {out['errors']}"
    res = host_results(out)
    assert res["h1"]["status"] == "completed"
    assert res["h2"]["status"] == "failed" and "mkdir -p /proc/not-writable/bundles" in res["h2"]["reason"]
    assert code == 1


def test_limit_runs_only_the_named_hosts_and_logs_land_in_the_state_dir(own_lab, tmp_path):
    lab = own_lab(3)
    proj = Project(tmp_path, quick_phase())
    remote = tmp_path / "remote"
    inv = write_inventory(tmp_path / "inv.yaml", inventory_doc(lab, remote))
    code, doc = proj.cli("run", "0", "--inventory", str(inv), "--json", "--limit", "h1,h3")
    assert code == 0, doc["errors"]
    assert sorted(host_results(doc)) == ["h1", "h3"]
    assert not (remote / "h2").exists(), "h2 was not contacted"
    for h, r in step_results(doc, "probe").items():
        log = Path(r["log_path"])
        assert log.is_relative_to(proj.state) and h in log.parts and log.is_file()
        assert json.loads(log.with_suffix(".stdout").read_text())["ok"] is True


def test_inventory_check_facts_reads_reachable_hosts_and_names_the_refused_one(own_lab, tmp_path):
    lab = own_lab(2)
    proj = Project(tmp_path, quick_phase())
    kh = lab.write_known_hosts(tmp_path / "known_hosts", wrong_key_for={"h2"})
    inv = write_inventory(tmp_path / "inv.yaml", inventory_doc(lab, tmp_path / "remote", known_hosts=str(kh)))
    code, doc = proj.cli("inventory", "check", "--facts", "--inventory", str(inv), "--json", state=False)
    assert code == 4
    facts = doc["results"]["facts"]
    assert facts["h1"]["ok"] is True and "nvcc" in facts["h1"] and "torch" in facts["h1"]
    assert facts["h2"]["ok"] is False and "host key for" in facts["h2"]["error"]
    assert [e["host"] for e in doc["errors"]] == ["h2"]
    assert not (tmp_path / "remote").exists(), "a read-only check ships nothing"


def test_a_step_past_its_timeout_is_killed_on_the_host(own_lab, tmp_path):
    lab = own_lab(2)
    marker = "31.4159"  # a unique sleep length, to find leftover processes by
    proj = Project(tmp_path, quick_phase(sleep_s=float(marker), timeout_s=2))
    inv = write_inventory(tmp_path / "inv.yaml", inventory_doc(lab, tmp_path / "remote"))
    started = time.monotonic()
    code, doc = proj.cli("run", "0", "--inventory", str(inv), "--json")
    elapsed = time.monotonic() - started
    assert code == 1
    for h, r in step_results(doc, "probe").items():
        assert r["status"] == "failed" and "timed out" in r["reason"], (h, r)
    assert elapsed < 30, "the run did not wait for the 31 s step"
    time.sleep(0.3)
    assert pids_with(marker) == [], "host-side `timeout` killed the step (T8)"
