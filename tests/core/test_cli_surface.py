"""CLI surface: lean imports, one JSON document, dry-run of the example fleet, error lines."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import yaml
from core_helpers import FAKE_TOOL, REPO, bundle_on_host, cli_offline, invoke, phase, step, tool

EXAMPLE = REPO / "inventory" / "example-blackwell.yaml"


def py(code: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, env=env, timeout=120)


def test_status_imports_neither_torch_nor_fabric(ws):
    ws.write_phase(phase(0, "a", [step("s", tool())]))
    code = (
        "import sys\nfrom orchestrator.cli import main\n"
        "try:\n    main(['status', '--json'])\nexcept SystemExit as e:\n    assert e.code in (0, None), e.code\n"
        "bad = sorted(m for m in ('torch', 'fabric', 'paramiko', 'invoke') if m in sys.modules)\n"
        "print('HEAVY', bad, file=sys.stderr)\n"
    )
    r = py(code)
    assert r.returncode == 0, r.stderr
    assert "HEAVY []" in r.stderr
    json.loads(r.stdout)


def test_dry_run_of_all_phases_on_the_example_fleet_is_one_document_and_connects_nowhere(ws):
    r = cli_offline(
        "run", "--all", "--dry-run", "--json", "--inventory", str(EXAMPLE), "--phases-dir", str(REPO / "phases")
    )
    assert "FABRIC False EXIT 0" in r.stderr, r.stderr
    doc = json.loads(r.stdout)  # exactly one document
    assert doc["ok"] is True and doc["dry_run"] is True and doc["command"] == "run"
    plan = doc["plan"]
    assert len(plan["digest"]) == 64 and len(plan["bundle_sha"]) == 64
    assert [p["label"] for p in plan["phases"]] == [
        "0-build-check",
        "1-parity",
        "2-microbench",
        "3-integration",
        "4-kv-defrag",
    ]
    hosts = plan["hosts"]
    assert len(hosts) == 6
    for ph in plan["phases"]:
        for s in ph["steps"]:
            assert sorted(c["host"] for c in s["commands"]) == sorted(hosts), (ph["label"], s["id"])
    build = plan["phases"][0]["steps"][1]["commands"][0]
    assert build["display"] == (
        f"cd /srv/orchestrator/bundles/{plan['bundle_sha']} && timeout -k 10 900 "
        "/srv/orchestrator/venv/bin/python -m verify_tools.build_check --arch sm_120a --json"
    )
    restart = next(s for s in plan["phases"][3]["steps"] if s["id"] == "restart")["commands"][0]["display"]
    assert '\'["sudo", "-n", "systemctl", "restart", "sglang-glm5.service"]\'' in restart
    assert plan["phases"][3]["steps"][3]["waves"][0] == ["bw-canary-01"]


def test_dry_run_of_100_hosts_is_fast(ws, capsys):
    ws.inventory.write_text(
        yaml.safe_dump(
            {
                "defaults": {
                    "connection": "ssh",
                    "known_hosts": "/k",
                    "user": "deploy",
                    "service": {
                        "restart": ["systemctl", "restart", "sglang"],
                        "health_url": "http://127.0.0.1:30000/health",
                        "generate_url": "http://127.0.0.1:30000/generate",
                        "python": "/usr/bin/python3",
                    },
                },
                "hosts": [{"name": f"gpu-{i:03d}", "address": f"10.0.{i // 250}.{i % 250 + 1}"} for i in range(100)],
            }
        )
    )
    from orchestrator.engine import Engine
    from orchestrator.inventory import load_inventory
    from orchestrator.specs import load_catalog

    eng = Engine(catalog=load_catalog(REPO / "phases"), inventory=load_inventory(ws.inventory), state_dir=ws.state)
    _ = eng.bundle_sha  # hash the bundle once (not part of planning)
    t0 = time.perf_counter()
    plan = eng.plan([], all_phases=True)
    dt = time.perf_counter() - t0
    n = sum(len(s.commands) for p in plan.phases for s in p.steps)
    with capsys.disabled():
        print(f"\n[dry-run] 100 hosts, 5 phases, {n} commands planned in {dt * 1000:.0f} ms")
    per_host = sum(1 for lp in load_catalog(REPO / "phases").phases for s in lp.spec.steps)  # each step once per host
    assert n == 100 * per_host and per_host >= 15 and not plan.problems
    assert dt < 5.0  # "well under 1 s" on a quiet machine; loose bound for shared CI cores


def test_dry_run_on_local_inventory_reports_missing_service_settings_as_exit_3(ws):
    r = invoke(
        "run",
        "--all",
        "--dry-run",
        "--json",
        "--inventory",
        str(REPO / "inventory" / "local.yaml"),
        "--phases-dir",
        str(REPO / "phases"),
    )
    assert r.exit_code == 3
    doc = json.loads(r.stdout)
    assert doc["plan"]["digest"] and "hosts(local).service.python: needed by phase 3-integration" in " ".join(
        e["message"] for e in doc["errors"]
    )


def test_errors_are_one_line_with_hint_and_traceback_only_with_debug(ws):
    ws.write_phase(phase(0, "a", [step("s", tool())]))
    r = ws.cli("run", "7")
    assert r.returncode == 3
    lines = r.stderr.strip().splitlines()
    assert lines[0].startswith("Error: unknown phase '7'") and lines[1].startswith("hint:") and len(lines) == 2
    r = ws.cli("run", "7", "--debug")
    assert "Traceback" in r.stderr


def test_json_error_is_exactly_one_document(ws):
    r = ws.cli("status", "--json", "--phases-dir", "/nonexistent")
    assert r.returncode == 3
    doc = json.loads(r.stdout)
    assert doc["ok"] is False and doc["exit_code"] == 3 and doc["errors"][0]["code"] == "INVALID_SPEC"


def test_python_dash_m_and_usage_errors(ws):
    r = ws.cli("--help")
    assert r.returncode == 0 and "status" in r.stdout
    assert ws.cli("run", "--forks", "0").returncode == 2
    r = ws.cli("run", "--forks", "0", "--json")  # a usage error is still one JSON document with --json
    assert r.returncode == 2
    doc = json.loads(r.stdout)
    assert doc["command"] == "run" and doc["errors"][0]["code"] == "USAGE" and "--forks" in doc["errors"][0]["message"]


def test_ssh_host_without_bundle_or_transport_fails_clearly_but_dry_run_works(ws, monkeypatch):
    """An ssh host whose transport cannot be created fails as unreachable (exit 4), never completed."""
    from orchestrator.engine import Engine, RunOptions
    from orchestrator.errors import HostUnreachable
    from orchestrator.inventory import load_inventory
    from orchestrator.specs import load_catalog

    ws.inventory.write_text(
        yaml.safe_dump(
            {"hosts": [{"name": "far", "connection": "ssh", "address": "192.0.2.1", "known_hosts": "/nonexistent"}]}
        )
    )
    ws.write_phase(phase(0, "a", [step("s", tool())]))

    def no_transport(host):
        raise HostUnreachable(f"host {host.name}: cannot connect (test)", host=host.name)

    eng = Engine(
        catalog=load_catalog(ws.phases),
        inventory=load_inventory(ws.inventory),
        state_dir=ws.state,
        transport_factory=no_transport,
    )
    assert eng.plan(["0"]).phases[0].steps[0].commands[0].display.startswith("cd /opt/orchestrator/bundles/")
    report = eng.run(["0"], options=RunOptions())
    assert report.exit_code == 4
    res = report.phases[0].steps[0].hosts["far"]
    assert res.status.value == "failed" and res.reason.startswith("unreachable")


def test_status_cold_start_is_at_most_3x_importing_pydantic_and_yaml(capsys):
    """``orchestrator status`` in a fresh interpreter vs ``python -c "import pydantic, yaml"``, both
    measured in this run (medians of 5, alternating): the ratio is printed and must not exceed 3x."""
    r = subprocess.run(
        [sys.executable, str(REPO / "tests" / "core" / "measure_cold_start.py"), "--repeat", "5", "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    with capsys.disabled():
        print(
            f"\n[cold start] orchestrator status {doc['status_median_s']:.3f} s vs import pydantic, yaml "
            f"{doc['import_pydantic_yaml_median_s']:.3f} s: ratio {doc['ratio']:.2f}x"
        )
    assert doc["max_ratio"] == 3.0
    assert doc["ratio"] <= doc["max_ratio"], (
        f"orchestrator status cold start is {doc['ratio']:.2f}x `import pydantic, yaml` "
        f"({doc['status_median_s']:.3f} s vs {doc['import_pydantic_yaml_median_s']:.3f} s); the bound is 3x"
    )


def test_a_status_process_ends_at_once_but_in_process_callers_and_exit_handlers_keep_theirs(ws):
    """``python -m orchestrator status`` (and the console script) end with os._exit once the
    output is flushed, so the output arrives whole; called in a process that has more to do
    (an argument list, or a ``__main__`` that is not the orchestrator's), ``main`` raises
    SystemExit and leaves the garbage collector as it found it; a registered exit handler
    (coverage, say) still runs."""
    ws.write_phase(phase(0, "a", [step("s", tool())]))
    whole = subprocess.run(
        [sys.executable, "-m", "orchestrator", "status", "--json"], cwd=REPO, capture_output=True, text=True
    )
    assert whole.returncode == 0 and json.loads(whole.stdout)["command"] == "status"
    in_process = (
        "import gc, sys\nfrom orchestrator.__main__ import main\n"
        "try:\n    main(['status', '--json'])\nexcept SystemExit as e:\n    print('EXIT', e.code, gc.isenabled(), file=sys.stderr)\n"
    )
    r = py(in_process)
    assert r.returncode == 0 and "EXIT 0 True" in r.stderr, r.stderr
    json.loads(r.stdout)
    handler = (
        "import atexit, sys\nfrom orchestrator.__main__ import main\n"
        "atexit.register(lambda: print('HANDLER RAN', file=sys.stderr))\n"
        "sys.argv = ['orchestrator', 'status', '--json']\nsys.exit(main())\n"
    )
    r = py(handler)  # this __main__ has `main` (like the console script), so it is the process entry
    assert r.returncode == 0 and "HANDLER RAN" in r.stderr, r.stderr
    json.loads(r.stdout)


def test_readme_test_command_is_byte_identical_to_ci():
    """.ci/run runs exactly the README's test command: the line after its marker comment."""
    readme = (REPO / "README.md").read_text()
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    cmd = ci[ci.index("# README test command (keep identical):") + 1]
    assert cmd.startswith("python3 -m venv .venv && ") and cmd.endswith("python -m pytest -q")
    assert "torch==2.13.0" in cmd  # CI pins the CPU build that lies on local disk
    assert f"\n{cmd}\n" in readme


class FakeRemote:
    """A transport that records what it is asked to run and answers like a kernel tool."""

    def __init__(self, host):
        self.host_name = host.name
        self.calls: list[tuple[list[str], str | None, float]] = []
        self.closed = False

    def run(self, argv, *, timeout_s, cwd=None, env=None, log_path=None):
        from orchestrator.transport.base import CommandResult

        self.calls.append((argv, cwd, timeout_s))
        return CommandResult(host=self.host_name, argv=argv, exit_code=0, stdout='{"ok": true, "n": 1}')

    def put(self, local_path, remote_path):  # pragma: no cover - not used by the engine
        raise NotImplementedError

    def close(self):
        self.closed = True


def test_ssh_hosts_ship_the_bundle_once_and_run_in_the_bundle_dir(ws, monkeypatch):
    """The engine ships the bundle (orchestrator.bundle.ship_bundle) once per host and phase, hash-checks
    it on the host (verify_on_host) before every later step, and runs every step there."""
    import orchestrator.bundle as bundle_mod
    from orchestrator.engine import Engine, RunOptions
    from orchestrator.inventory import load_inventory
    from orchestrator.specs import load_catalog

    ws.inventory.write_text(
        yaml.safe_dump(
            {
                "defaults": {"connection": "ssh", "known_hosts": "/k", "remote_root": "/srv/o"},
                "hosts": [{"name": "g1", "address": "10.0.0.1"}, {"name": "g2", "address": "10.0.0.2"}],
            }
        )
    )
    ws.write_phase(
        phase(
            0,
            "a",
            [
                step("s", ["{python}", "-m", "kernels.x", "--dir", "{bundle_dir}"], metrics=["n"]),
                step("t", ["{python}", "-m", "kernels.y"]),
            ],
        )
    )
    shipped: list[str] = []
    checked: list[str] = []

    def ship_bundle(transport, bundle, host):
        shipped.append(host.name)
        return bundle_on_host(host, bundle)

    def verify_on_host(transport, bundle, host):
        checked.append(host.name)
        return "ok"

    monkeypatch.setattr(bundle_mod, "ship_bundle", ship_bundle)
    monkeypatch.setattr(bundle_mod, "verify_on_host", verify_on_host)
    transports: dict[str, FakeRemote] = {}

    def factory(host):
        transports[host.name] = FakeRemote(host)
        return transports[host.name]

    eng = Engine(
        catalog=load_catalog(ws.phases),
        inventory=load_inventory(ws.inventory),
        state_dir=ws.state,
        transport_factory=factory,
    )
    plan = eng.plan(["0"])
    report = eng.run(["0"], options=RunOptions(forks=2))
    assert report.exit_code == 0
    assert sorted(shipped) == ["g1", "g2"]  # once per host, not once per step
    assert sorted(checked) == ["g1", "g2"]  # and hash-checked again before the second step
    want_dir = f"/srv/o/bundles/{eng.bundle_sha}"
    for name, t in transports.items():
        assert t.closed
        assert [c[1] for c in t.calls] == [want_dir, want_dir]
        assert t.calls[0][0] == ["python3", "-m", "kernels.x", "--dir", want_dir]
        planned = next(c for c in plan.phases[0].steps[0].commands if c.host == name)
        assert planned.argv == t.calls[0][0] and planned.cwd == want_dir
    assert report.phases[0].steps[0].hosts["g1"].metrics == {"n": 1}


def test_orchestrator_json_env_switches_every_command_to_json(ws):
    ws.write_phase(phase(0, "a", [step("s", tool())]))
    r = subprocess.run(
        [sys.executable, "-m", "orchestrator", "phases"],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**__import__("os").environ, "ORCHESTRATOR_JSON": "1"},
        timeout=120,
    )
    assert r.returncode == 0 and json.loads(r.stdout)["results"]["phases"][0]["name"] == "a"


def test_inventory_check_facts_reads_local_toolchain_and_reports_unreachable_hosts_with_4(ws):
    r = invoke("inventory", "check", "--facts", "--json")
    assert r.exit_code == 0, r.output
    facts = json.loads(r.stdout)["results"]["facts"]["local"]
    assert facts["ok"] is True and facts["torch"]["found"] is True and "nvcc" in facts and "gpu" in facts
    ws.inventory.write_text(
        yaml.safe_dump(
            {
                "hosts": [
                    {"name": "local", "connection": "local"},
                    {
                        "name": "gone",
                        "connection": "ssh",
                        "address": "127.0.0.1",
                        "port": 1,
                        "known_hosts": str(ws.root / "kh"),
                        "connect_timeout_s": 1,
                    },
                ]
            }
        )
    )
    (ws.root / "kh").write_text("")
    r = invoke("inventory", "check", "--facts", "--json")
    assert r.exit_code == 4, r.output
    doc = json.loads(r.stdout)
    assert doc["results"]["facts"]["local"]["ok"] is True
    assert doc["errors"][0]["host"] == "gone" and doc["errors"][0]["code"] == "UNREACHABLE"


def test_fleet_evidence_is_summarised_per_metric():
    from orchestrator.state import HostStepResult
    from orchestrator.views import evidence_summary

    rs = [
        HostStepResult(metrics={"summary.spill_bytes": 0, "summary.speedup": s, "arch": a})
        for s, a in ((21.5, "sm_120a"), (30.0, "sm_120a"), (25.25, "sm_90a"))
    ]
    assert evidence_summary(rs) == ["spill_bytes=0", "speedup=21.5..30", "arch=<2 values>"]


def test_dry_run_writes_nothing(ws):
    ws.write_phase(phase(0, "a", [step("s", tool("--touch", str(ws.root / "ran")))]))
    r = invoke("run", "0", "--dry-run")
    assert r.exit_code == 0, r.output
    assert "Plan digest:" in r.stdout and str(FAKE_TOOL) in r.stdout
    assert not ws.state.exists() and not (ws.root / "ran").exists()
