"""Measure ``orchestrator run --all --dry-run --json`` over a generated 100-host SSH inventory.

Reports the wall time of the whole CLI process (interpreter start, imports, bundle hash,
plan of every phase, JSON output) next to the bare start-up of the CLI (``--version``), and
the in-process planning time alone. Target: under 1 s for the dry-run. A measurement, not a
test: nothing here asserts a time.

    python tests/ssh/measure_dry_run.py [--hosts 100] [--repeat 5] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TARGET_S = 1.0


def fleet(n: int) -> dict:
    return {
        "defaults": {
            "connection": "ssh",
            "user": "deploy",
            "ssh_key": "~/.ssh/orchestrator_ed25519",
            "known_hosts": "~/.ssh/known_hosts_orchestrator",
            "remote_root": "/srv/orchestrator",
            "python": "/srv/orchestrator/venv/bin/python",
            "arch": "sm_120a",
            "connect_timeout_s": 10,
            "service": {
                "restart": ["sudo", "-n", "systemctl", "restart", "sglang.service"],
                "health_url": "http://127.0.0.1:30000/health",
                "generate_url": "http://127.0.0.1:30000/generate",
                "python": "/srv/sglang/venv/bin/python",
            },
        },
        "groups": {"canary": ["gpu-000"], "prod": [f"gpu-{i:03d}" for i in range(1, n)]},
        "hosts": [{"name": f"gpu-{i:03d}", "address": f"10.40.{i // 250}.{i % 250 + 1}"} for i in range(n)],
    }


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    p = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    return time.perf_counter() - t0, p


def main() -> int:
    import yaml

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for k in ("ORCHESTRATOR_STATE_DIR", "ORCHESTRATOR_INVENTORY", "ORCHESTRATOR_ROOT", "ORCHESTRATOR_PHASES_DIR"):
        env.pop(k, None)
    with tempfile.TemporaryDirectory(prefix="dry-run-") as tmp:
        tmp = Path(tmp)
        inv = tmp / "fleet.yaml"
        inv.write_text(yaml.safe_dump(fleet(args.hosts), sort_keys=False))
        dry = [
            sys.executable,
            "-m",
            "orchestrator",
            "run",
            "--all",
            "--dry-run",
            "--json",
            "--inventory",
            str(inv),
            "--state-dir",
            str(tmp / "state"),
        ]
        base = [sys.executable, "-m", "orchestrator", "--version"]
        walls, bases, doc = [], [], None
        for _ in range(args.repeat):
            w, p = timed(dry, env, tmp)
            if p.returncode != 0:
                print(f"dry-run failed (exit {p.returncode}):\n{p.stdout[-1500:]}\n{p.stderr[-1500:]}", file=sys.stderr)
                return 1
            walls.append(w)
            doc = json.loads(p.stdout)
            b, _ = timed(base, env, tmp)
            bases.append(b)
        # in-process: planning alone (bundle hashed once beforehand)
        sys.path.insert(0, str(REPO))
        from orchestrator.engine import Engine
        from orchestrator.inventory import load_inventory
        from orchestrator.specs import load_catalog

        eng = Engine(catalog=load_catalog(REPO / "phases"), inventory=load_inventory(inv), state_dir=tmp / "state")
        _ = eng.bundle_sha  # hash the bundle once, outside the timed plans
        plans = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            eng.plan([], all_phases=True)
            plans.append(time.perf_counter() - t0)
    commands = sum(len(s["commands"]) for p in doc["plan"]["phases"] for s in p["steps"])
    med = statistics.median(walls)
    result = {
        "measurement": f"orchestrator run --all --dry-run --json over {args.hosts} ssh hosts",
        "hosts": args.hosts,
        "phases": len(doc["plan"]["phases"]),
        "commands_planned": commands,
        "digest": doc["plan"]["digest"],
        "cpus": os.cpu_count(),
        "loadavg_1m": round(os.getloadavg()[0], 2),
        "cli_wall_s": [round(w, 3) for w in walls],
        "median_cli_wall_s": round(med, 3),
        "cli_startup_only_s (--version)": round(statistics.median(bases), 3),
        "in_process_plan_s": [round(x, 4) for x in plans],
        "target_s": TARGET_S,
        "under_target": med < TARGET_S,
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        from orchestrator.atomic import atomic_write_text  # sys.path holds REPO by now

        atomic_write_text(args.out, text + "\n")
    print(
        f"\ndry-run of {len(doc['plan']['phases'])} phases x {args.hosts} hosts ({commands} commands): "
        f"median {med:.3f} s wall (target < {TARGET_S} s); CLI start-up alone "
        f"{statistics.median(bases):.3f} s; planning in-process {statistics.median(plans):.3f} s",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
