"""Cold start of ``orchestrator status`` relative to ``python -c "import pydantic, yaml"``.

Both are run as fresh interpreters, alternating, ``--repeat`` times each; the medians and their
ratio are printed (and, with ``--json``, one JSON document, which also carries the bound
``max_ratio``). The script itself asserts nothing: tests/core/test_cli_surface.py fails when the
ratio measured in one run is above :data:`MAX_RATIO` (issue 10: at most 3x the baseline).

    python tests/core/measure_cold_start.py --repeat 5
    python tests/core/measure_cold_start.py --repeat 5 --hosts 8   # status of a recorded fleet

By default the state dir is empty (a fresh checkout: status renders every phase pending). With
``--hosts N`` it holds a ``state.json`` in which every phase and step of ``phases/`` completed on
N hosts, with metrics and bundle evidence (built with the orchestrator's own models), so the
measurement includes validating and rendering a real record.
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
#: The most ``orchestrator status`` may take, as a multiple of ``python -c "import pydantic, yaml"``
#: measured in the same run (the baseline cancels the machine's speed and load).
MAX_RATIO = 3.0


def wall(argv: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0


def write_fleet_state(state_dir: Path, hosts: int) -> None:
    """A state.json in which every phase of ``phases/`` completed on ``hosts`` hosts."""
    sys.path.insert(0, str(REPO))
    from orchestrator.specs import load_catalog
    from orchestrator.state import (
        BundleEvidence,
        HostPhase,
        HostStepResult,
        PhaseRecord,
        RunInfo,
        RunState,
        StateStore,
        Status,
        StepRecord,
        utcnow,
    )

    names = [f"gpu-{i:02d}" for i in range(hosts)]
    sha = "ab" * 32
    state = RunState(bundle_sha=sha)
    for lp in load_catalog(REPO / "phases").phases:
        steps = [
            StepRecord(
                id=st.id,
                content=st.title,
                priority=st.priority.value,
                status=Status.completed,
                hosts={
                    h: HostStepResult(
                        status=Status.completed,
                        exit_code=0,
                        duration_s=1.5 + i,
                        metrics={"summary.spill_bytes": 0, "summary.max_abs_err": 0.001 * (i + 1), "ok": True},
                    )
                    for i, h in enumerate(names)
                },
            )
            for st in lp.spec.steps
        ]
        state.phases[str(lp.spec.id)] = PhaseRecord(
            id=lp.spec.id,
            name=lp.spec.name,
            title=lp.spec.title,
            status=Status.completed,
            bundle_sha=sha,
            hosts={
                h: HostPhase(
                    status=Status.completed,
                    bundle_sha=sha,
                    bundle=BundleEvidence(sha256=sha, remote_dir=f"/opt/o/bundles/{sha}", verified=True, checks=2),
                )
                for h in names
            },
            steps=steps,
        )
    state.last_run = RunInfo(
        run_id="20261201T000000Z-abc123",
        command="orchestrator run 0",
        pid=1,
        hostname="c",
        user="u",
        started_at=utcnow(),
        exit_code=0,
    )
    StateStore(state_dir).save(state)


def measure(repeat: int, hosts: int = 0) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as d:
        if hosts:
            write_fleet_state(Path(d), hosts)
        env = {**os.environ, "ORCHESTRATOR_STATE_DIR": d}
        status_cmd = [sys.executable, "-m", "orchestrator", "status"]
        base_cmd = [sys.executable, "-c", "import pydantic, yaml"]
        wall(status_cmd, env)  # warm the page cache / bytecode once
        wall(base_cmd, env)
        s, b = [], []
        for _ in range(repeat):
            s.append(wall(status_cmd, env))
            b.append(wall(base_cmd, env))
    ms, mb = statistics.median(s), statistics.median(b)
    return {
        "repeat": repeat,
        "status_median_s": round(ms, 4),
        "import_pydantic_yaml_median_s": round(mb, 4),
        "ratio": round(ms / mb, 2),
        "max_ratio": MAX_RATIO,
        "hosts_in_state": hosts,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--json", action="store_true")
    p.add_argument("--hosts", type=int, default=0, help="a recorded fleet of N hosts in the state (default: empty)")
    a = p.parse_args()
    r = measure(a.repeat, a.hosts)
    if a.json:
        print(json.dumps(r))
    else:
        print(
            f"orchestrator status ({a.hosts} hosts in the state): {r['status_median_s']:.3f} s median of {r['repeat']}; "
            f"python -c 'import pydantic, yaml': {r['import_pydantic_yaml_median_s']:.3f} s; "
            f"ratio {r['ratio']:.2f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
