"""Cold start of ``orchestrator status`` relative to ``python -c "import pydantic, yaml"``.

Both are run as fresh interpreters, alternating, ``--repeat`` times each; the medians and their
ratio are printed (and, with ``--json``, one JSON document, which also carries the bound
``max_ratio``). The script itself asserts nothing: tests/core/test_cli_surface.py fails when the
ratio measured in one run is above :data:`MAX_RATIO` (issue 10: at most 3x the baseline).

    python tests/core/measure_cold_start.py --repeat 5
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


def measure(repeat: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as d:
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
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    r = measure(a.repeat)
    if a.json:
        print(json.dumps(r))
    else:
        print(
            f"orchestrator status: {r['status_median_s']:.3f} s median of {r['repeat']}; "
            f"python -c 'import pydantic, yaml': {r['import_pydantic_yaml_median_s']:.3f} s; "
            f"ratio {r['ratio']:.2f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
