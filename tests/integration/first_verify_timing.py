"""Time from a service-like process start to its first bundled verify call (GPU machine only).

    python tests/integration/first_verify_timing.py --mode prebuilt|jit --procs N [--cache DIR]

Starts N processes at once (like the TP ranks of one SGLang service), each of which imports
torch, loads the kernel the way the mode says and runs one verify call on a small SGLang-layout
batch (mla_verify.inputs), then reports the seconds from its launch (the parent's clock just
before the spawn) to the end of that call, plus a hash of the output so the two modes can be
compared bit for bit.

- ``prebuilt``: what a service does: ``MLA_VERIFY_PREBUILT_ONLY=1`` and the plugin's own
  preflight (``sglang_verify_plugin.verify_hook.load_prebuilt_library``: hash-checked
  ``<bundle>/build/<arch>`` library, no compiler, no lock).
- ``jit``: today's first-call JIT (torch cpp_extension, build lock) into a fresh cache
  (``--cache``), with no prebuilt library visible.

Run from the bundle root (kernels/). Prints one JSON document.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path


def child(mode: str, t_launch: float) -> dict:
    t0 = time.time()
    import torch

    from mla_verify import api, inputs

    t_torch = time.time()
    device = torch.device("cuda")
    library = None
    if mode == "prebuilt":
        from sglang_verify_plugin.verify_hook import load_prebuilt_library

        library = load_prebuilt_library(device)
    spec = inputs.CaseSpec("first-call", (512, 2048), (4, 4), 16, tree="chain")
    inp = inputs.make_inputs(spec, device=device)
    t_inputs = time.time()
    out = api.mla_verify_fwd(*inputs.kernel_args(inp), **inputs.kernel_kwargs(inp))
    torch.cuda.synchronize()
    t_done = time.time()
    import hashlib

    digest = hashlib.sha256(out.view(torch.int16).cpu().numpy().tobytes()).hexdigest()
    return {
        "mode": mode,
        "pid": os.getpid(),
        "prebuilt_only": os.environ.get("MLA_VERIFY_PREBUILT_ONLY") == "1",
        "interpreter_start_s": round(t0 - t_launch, 3),
        "torch_import_s": round(t_torch - t0, 3),
        "load_and_first_call_s": round(t_done - t_inputs, 3),
        "since_launch_s": round(t_done - t_launch, 3),
        "output_sha256": digest,
        "library_sha256": (library or {}).get("sha256"),
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=("prebuilt", "jit"), required=True)
    ap.add_argument("--procs", type=int, default=1)
    ap.add_argument("--cache", default=None, help="jit: the (fresh) kernel cache folder")
    ap.add_argument("--timeout", type=float, default=240.0)
    ap.add_argument("--child", type=float, default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child is not None:
        print(json.dumps(child(a.mode, a.child)))
        return 0
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path.cwd()), env.get("PYTHONPATH")]))
    if a.mode == "prebuilt":
        env["MLA_VERIFY_PREBUILT_ONLY"] = "1"
    else:
        env.pop("MLA_VERIFY_PREBUILT_ONLY", None)
        env["MLA_VERIFY_BUILD_DIR"] = "/nonexistent-no-prebuilt"
        if a.cache:
            env["ORCHESTRATOR_KERNEL_CACHE"] = a.cache
    t_launch = time.time()
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--mode", a.mode, "--child", repr(t_launch)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(a.procs)
    ]
    results, errors = [], []
    deadline = t_launch + a.timeout
    for p in procs:
        try:
            out, err = p.communicate(timeout=max(1.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            errors.append(f"pid {p.pid}: still running after {a.timeout:g}s (killed)")
            continue
        line = (out.strip().splitlines() or [""])[-1]
        try:
            results.append(json.loads(line))
        except ValueError:
            errors.append(f"pid {p.pid} exit {p.returncode}: {err.strip()[-800:]}")
    times = [r["since_launch_s"] for r in results]
    doc = {
        "mode": a.mode,
        "procs": a.procs,
        "ok": not errors and len(results) == a.procs,
        "since_launch_s_max": max(times) if times else None,
        "since_launch_s_median": statistics.median(times) if times else None,
        "since_launch_s_min": min(times) if times else None,
        "distinct_outputs": sorted({r["output_sha256"] for r in results}),
        "results": results,
        "errors": errors,
    }
    print(json.dumps(doc))
    return 0 if doc["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
