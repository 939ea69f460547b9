"""The dense kernel's trace build in SASS (no GPU): are its phase marks' clock reads where the source put them?

Usage: python -m verify_tools.sass [--arch sm_90a] [--json] [--nvcc PATH] [--cuobjdump PATH]

The trace build (csrc with -DMLAV_TRACE=1, tests/device/dense_trace.py) sums SM cycles per phase: each mark reads
the clock and adds the difference to the previous mark's read. ptxas may rematerialize that previous read, a plain
clock read, as a fresh one where it is used, so the slot gets (now - a read taken just after now) and the phase's
real cycles vanish. Session 45's build did so at the ASYM kernels' PV mark (the slot summed negative); PhaseTrace
(csrc/mla_verify_wgmma.cuh) now hides the value from ptxas. This tool compiles the trace build to a cubin, dumps it
with cuobjdump and counts, per kernel, clock reads (SR_CLOCKLO) and clock reads that follow another within
CLOCK_PAIR_WINDOW instructions: no two marks of the source are that close, so every such pair is a rematerialized
read. ok: no pair, and the warp-specialized kernels have clock reads (the build is the trace build).

cuobjdump: --cuobjdump, PATH, or the pip package nvidia-cuda-cuobjdump (the test extra; nvidia/cu13/bin), with
nvdisasm (nvidia-cuda-nvdisasm) on PATH or beside it. Exit 0 ok, 1 a pair found or the build failed, 75 nvcc or
cuobjdump missing.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from mla_verify._build import CSRC, nvcc_flags
from tool_contract import EXIT_BLOCKED, emit

ARCHES = ("sm_90a",)  # the phase marks (PhaseTrace) are in the wgmma kernels only
CLOCK_PAIR_WINDOW = 2  # instructions: a clock read within this many after another is a rematerialized one
TRACE_FLAG = "-DMLAV_TRACE=1"
WS_KERNEL = "mla_verify_split_wgmma_ws"  # the warp-specialized kernels' names contain this

_FUNCTION = re.compile(r"Function : (\S+)")
_INSTR = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;")


def find_cuobjdump(explicit: str | None = None) -> str | None:
    """cuobjdump's path: ``explicit``, PATH, or the nvidia-cuda-cuobjdump package's bin folder; None if none."""
    if explicit:
        return explicit if Path(explicit).exists() else None
    found = shutil.which("cuobjdump")
    if found:
        return found
    spec = importlib.util.find_spec("nvidia")
    roots = (spec.submodule_search_locations or []) if spec else []
    cands = sorted(c for root in roots for c in Path(root).glob("cu*/bin/cuobjdump"))
    return str(cands[0]) if cands else None


def parse_sass(text: str) -> dict[str, list[str]]:
    """cuobjdump -sass output -> {function (mangled name): its instructions, in address order (text, no ';')}."""
    out: dict[str, list[str]] = {}
    cur: list[str] | None = None
    for line in text.splitlines():
        m = _FUNCTION.search(line)
        if m:
            cur = out.setdefault(m.group(1), [])
            continue
        m = _INSTR.search(line)
        if m and cur is not None:
            cur.append(m.group(1))
    return out


def clock_reads(instrs: list[str], window: int = CLOCK_PAIR_WINDOW) -> tuple[int, list[int]]:
    """(clock reads, indices of the reads that follow another read within ``window`` instructions)."""
    at = [i for i, ins in enumerate(instrs) if "SR_CLOCKLO" in ins]
    return len(at), [b for a, b in zip(at, at[1:]) if b - a <= window]


def _failed(arch: str, error: str) -> dict:
    return {"ok": False, "arch": arch, "kernels": [], "errors": [error]}


def trace_sass(arch: str, nvcc: str, cuobjdump: str) -> dict:
    """Compile csrc/mla_verify.cu's trace build for ``arch`` (the build's own flags plus TRACE_FLAG), dump its SASS
    and report per kernel: instructions, clock_reads, pairs (instruction indices of the rematerialized reads)."""
    src = CSRC / "mla_verify.cu"
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "trace.cubin"
        cmd = [nvcc, *nvcc_flags(arch), TRACE_FLAG, "-cubin", "-I", str(CSRC), "-o", str(cubin), str(src)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            return _failed(arch, f"nvcc exited {proc.returncode}: {proc.stderr[-2000:]}")
        # cuobjdump -sass runs nvdisasm: PATH, or the folder cuobjdump lies in (the pip packages share one)
        env = dict(os.environ, PATH=os.pathsep.join([os.environ.get("PATH", ""), str(Path(cuobjdump).parent)]))
        dump = subprocess.run([cuobjdump, "-sass", str(cubin)], capture_output=True, text=True, timeout=300, env=env)
    if dump.returncode != 0:
        return _failed(arch, f"cuobjdump exited {dump.returncode}: {dump.stderr[-2000:]}")
    kernels = []
    for name, instrs in parse_sass(dump.stdout).items():
        n, pairs = clock_reads(instrs)
        if n:
            kernels.append({"name": name, "instructions": len(instrs), "clock_reads": n, "pairs": pairs})
    errors = [f"{k['name']}: {len(k['pairs'])} clock read(s) right after another" for k in kernels if k["pairs"]]
    if not any(WS_KERNEL in k["name"] for k in kernels):
        errors.append(f"no clock reads in the {WS_KERNEL}* kernels: not a trace build")
    return {"ok": not errors, "arch": arch, "kernels": kernels, "errors": errors}


def _print_report(doc: dict) -> None:
    for k in doc.get("kernels", []):
        print(f"{k['clock_reads']:4d} clock reads, {len(k['pairs']):2d} pairs  {k['name']}")
    for e in doc.get("errors", []):
        print(f"error: {e}")
    print("ok" if doc["ok"] else "FAILED")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m verify_tools.sass", description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="sm_90a", choices=ARCHES, help="target (sm_90a)")
    ap.add_argument("--json", action="store_true", help="print one JSON document")
    ap.add_argument("--nvcc", default=None, help="nvcc path (default: PATH)")
    ap.add_argument("--cuobjdump", default=None, help="cuobjdump path (default: PATH, then the pip package)")
    a = ap.parse_args(argv)
    nvcc = a.nvcc or shutil.which("nvcc")
    cuobjdump = find_cuobjdump(a.cuobjdump)
    if not nvcc or not Path(nvcc).exists() or not cuobjdump:
        missing = "nvcc (PATH)" if not nvcc or not Path(nvcc).exists() else "cuobjdump (PATH, nvidia-cuda-cuobjdump)"
        doc = {"ok": False, "arch": a.arch, "blocked": f"{missing} not found", "kernels": [], "errors": []}
        return emit(doc, a.json, EXIT_BLOCKED, human=_print_report)
    doc = trace_sass(a.arch, nvcc, cuobjdump)
    return emit(doc, a.json, 0 if doc["ok"] else 1, human=_print_report)


if __name__ == "__main__":
    raise SystemExit(main())
