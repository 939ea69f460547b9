"""Measure a quick remote phase (facts, bundle upload, hash check) on 1 host vs N hosts.

Starts its own sshd lab, then per host, in parallel (one thread per host, capped by
``--parallel``): connect, collect toolchain facts (``orchestrator.facts``), ship the bundle
of this checkout's ``kernels/`` to a fresh remote root (upload + unpack + verify), and verify
it once more as a step would before use. The same again without facts ("transport_only")
separates SSH/transfer scaling from the host-side CPU work of the facts probes. Prints the timings and writes them as JSON. A
measurement, not a test: nothing here asserts a time.

    python tests/ssh/measure_quick_phase.py [--hosts 8] [--repeat 3] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import types
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path[:0] = [str(REPO)]

from orchestrator import facts  # noqa: E402
from orchestrator.atomic import atomic_write_text  # noqa: E402
from orchestrator.bundle import build_bundle, ship_bundle, verify_on_host  # noqa: E402
from orchestrator.transport.ssh import SSHTransport  # noqa: E402
from tests.support import sshd_lab  # noqa: E402


def quick_phase(host, bundle, with_facts: bool) -> dict:
    """(facts +) ship + verify on one host; returns per-part timings."""
    t0 = time.monotonic()
    with SSHTransport(host) as t:
        t.run(["true"], timeout_s=10)  # connect + auth + first command
        t1 = time.monotonic()
        doc = {"nvcc": {"found": None}}
        if with_facts:
            doc = json.loads(facts.collect(t, host.python, cwd=None, timeout_s=60, log_path=None).stdout)
        t2 = time.monotonic()
        shipped = ship_bundle(t, bundle, host)
        t3 = time.monotonic()
        verdict = verify_on_host(t, bundle, host)
        t4 = time.monotonic()
    if not shipped.uploaded or verdict != "ok":
        raise RuntimeError(f"{host.name}: expected a fresh upload and a verified bundle, got {shipped} / {verdict}")
    return {
        "host": host.name,
        "connect_s": t1 - t0,
        "facts_s": t2 - t1,
        "ship_s": t3 - t2,
        "verify_s": t4 - t3,
        "total_s": t4 - t0,
        "nvcc_found": doc["nvcc"]["found"],
    }


def warm_command_s(lab) -> float:
    """Median round trip of ``true`` on an open connection: what every remote step costs here
    (dominated by the host's login shell start-up, e.g. a ``~/.bashrc`` that bash sources for
    every SSH command)."""
    h = lab.hosts[0]
    host = types.SimpleNamespace(
        name=h.name,
        address=h.address,
        port=h.port,
        user=lab.user,
        ssh_key=lab.client_key,
        known_hosts=lab.known_hosts,
        connect_timeout_s=10,
        command_timeout_s=60,
    )
    with SSHTransport(host) as t:
        t.run(["true"], timeout_s=10)
        times = []
        for _ in range(5):
            t0 = time.monotonic()
            t.run(["true"], timeout_s=10)
            times.append(time.monotonic() - t0)
    return statistics.median(times)


def run_round(lab, hosts: list[str], bundle, root: Path, parallel: int, with_facts: bool) -> dict:
    hs = [
        types.SimpleNamespace(
            name=n,
            address=lab.host(n).address,
            port=lab.host(n).port,
            user=lab.user,
            ssh_key=lab.client_key,
            known_hosts=lab.known_hosts,
            remote_root=str(root / n),
            python=sys.executable,
            connect_timeout_s=5,
            command_timeout_s=60,
        )
        for n in hosts
    ]
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=min(parallel, len(hs))) as pool:
        per_host = list(pool.map(lambda h: quick_phase(h, bundle, with_facts), hs))
    return {"hosts": len(hs), "wall_s": time.monotonic() - started, "per_host": per_host}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--parallel", type=int, default=16, help="concurrency cap")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    reason = sshd_lab.sshd_missing_reason()
    if reason:
        print(f"skipped: {reason}", file=sys.stderr)
        return 75
    with tempfile.TemporaryDirectory(prefix="quick-phase-") as tmp:
        tmp = Path(tmp)
        bundle = build_bundle(REPO, tmp / "bundle")
        lab = sshd_lab.start_lab(tmp / "lab", args.hosts)
        try:
            names = [h.name for h in lab.hosts]
            warm = warm_command_s(lab)
            rounds: dict[str, dict[str, list]] = {}
            for variant, with_facts in (("with_facts", True), ("transport_only", False)):
                one, many = [], []
                for i in range(args.repeat):  # alternate so drift hits both sides alike
                    one.append(run_round(lab, names[:1], bundle, tmp / f"{variant}-{i}-one", args.parallel, with_facts))
                    many.append(run_round(lab, names, bundle, tmp / f"{variant}-{i}-many", args.parallel, with_facts))
                rounds[variant] = {"one": one, "many": many}
        finally:
            lab.stop()
    result: dict = {
        "measurement": "quick phase over SSH: connect, [facts], bundle upload+unpack+verify, verify again",
        "bundle": {"sha256": bundle.sha256, "files": bundle.files, "bytes": bundle.size_bytes},
        "cpus": os.cpu_count(),
        "loadavg_1m_after": round(os.getloadavg()[0], 2),
        "note": "all lab hosts share this machine's CPUs: the hosts' own work (python/torch start-up "
        "in facts, tar, sha256sum) competes for the same cores, unlike a real fleet",
        "repeat": args.repeat,
        "parallel_cap": args.parallel,
        "hosts": args.hosts,
        "warm_true_round_trip_s": round(warm, 3),
        "remote_commands_per_host": "transport_only: 1 connect + 6 commands + 1 sftp upload; "
        "with_facts adds the facts probes",
    }
    summary = []
    for variant, r in rounds.items():
        w1 = statistics.median(x["wall_s"] for x in r["one"])
        wn = statistics.median(x["wall_s"] for x in r["many"])
        result[variant] = {
            "one_host_wall_s": [round(x["wall_s"], 3) for x in r["one"]],
            "many_hosts_wall_s": [round(x["wall_s"], 3) for x in r["many"]],
            "median_one_host_s": round(w1, 3),
            "median_many_hosts_s": round(wn, 3),
            "ratio_many_over_one": round(wn / w1, 2),
            "serial_would_be_ratio": args.hosts,
            "last_round_per_host": [
                {k: (round(v, 3) if isinstance(v, float) else v) for k, v in h.items()}
                for h in r["many"][-1]["per_host"]
            ],
        }
        summary.append(f"{variant}: 1 host {w1:.2f} s, {args.hosts} hosts {wn:.2f} s, ratio {wn / w1:.2f}x")
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        atomic_write_text(args.out, text + "\n")
    print(
        "\n" + "\n".join(summary) + f"  (serial would be {args.hosts}x); one warm `true` round trip {warm:.3f} s",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
