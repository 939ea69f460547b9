"""Build check (phase 0): nvcc-compile the kernel sources for one arch and report ptxas resources.

Usage: python -m verify_tools.build_check --arch sm_120a|sm_90a [--json] [--nvcc PATH]

Compiles kernels/mla_verify/csrc/mla_verify.cu (no GPU and no torch needed) to a cubin with
`-Xptxas -v` and parses, per kernel: registers, spill store/load bytes, stack frame, static
smem. smem_bytes = static + the dynamic smem the launcher requests for that tile config
(kernels/mla_verify/tiles.py: parsed from the BM/BN/STAGES template arguments in the mangled
name; the wgmma kernel is matched by name). ok requires 0 spill bytes and smem_bytes within the arch's per-block limit
(227 KiB sm_90a, 99 KiB sm_120a) for every kernel. Exit 0 ok, 1 a check failed, 2 usage,
75 nvcc missing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mla_verify import tiles
from mla_verify._build import CSRC, nvcc_flags

EXIT_BLOCKED = 75
ARCHES = ("sm_90a", "sm_120a")

_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(sm_\w+)'")
_PROPS = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")
_TPL = re.compile(r"mla_verify_split_kernelILi(\d+)ELi(\d+)ELi(\d+)E")


def parse_ptxas(text: str) -> list[dict]:
    """Per-kernel resources from `ptxas -v` output (entry order preserved)."""
    kernels: list[dict] = []
    cur = None
    for line in text.splitlines():
        m = _ENTRY.search(line)
        if m:
            cur = {
                "name": m.group(1),
                "arch": m.group(2),
                "registers": None,
                "spill_store_bytes": 0,
                "spill_load_bytes": 0,
                "stack_bytes": 0,
                "static_smem_bytes": 0,
            }
            kernels.append(cur)
            continue
        if cur is None:
            continue
        m = _PROPS.search(line)
        if m:
            cur["stack_bytes"], cur["spill_store_bytes"], cur["spill_load_bytes"] = map(int, m.groups())
        m = _USED.search(line)
        if m:
            cur["registers"] = int(m.group(1))
            s = _SMEM.search(line)
            if s:
                cur["static_smem_bytes"] = int(s.group(1))
    return kernels


def dynamic_smem(name: str) -> tuple[int, str | None]:
    """Dynamic smem the launcher requests for a kernel, and its tile config name (None: combine)."""
    if "mla_verify_split_wgmma_kernel" in name:
        return tiles.SM90WG.smem_bytes, tiles.SM90WG.name
    m = _TPL.search(name)
    if not m:
        return 0, None
    bm, bn, st = map(int, m.groups())
    cfg = next(
        (
            c.name
            for c in tiles.CONFIGS.values()
            if c.engine == "mma" and (c.block_m, c.block_n, c.stages) == (bm, bn, st)
        ),
        None,
    )
    return tiles.smem_bytes(bm, bn, st), cfg


def nvcc_version(nvcc: str) -> str:
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60).stdout
    m = re.search(r"release (\S+), V(\S+)", out)
    return m.group(2) if m else out.strip().splitlines()[-1]


def build(arch: str, nvcc: str) -> dict:
    limit = tiles.SMEM_LIMIT[arch]
    with tempfile.TemporaryDirectory(prefix="mlav-build-") as tmp:
        cmd = [
            nvcc,
            *nvcc_flags(arch),
            "-Xptxas",
            "-v",
            "-cubin",
            "-I",
            str(CSRC),
            str(CSRC / "mla_verify.cu"),
            "-o",
            os.path.join(tmp, "mla_verify.cubin"),
        ]
        t0 = time.time()
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        secs = round(time.time() - t0, 2)
    log = proc.stdout + proc.stderr
    kernels = parse_ptxas(log)
    for k in kernels:
        dyn, cfg = dynamic_smem(k["name"])
        k["tile_config"] = cfg
        k["dynamic_smem_bytes"] = dyn
        k["smem_bytes"] = k["static_smem_bytes"] + dyn
        k["spill_bytes"] = k["spill_store_bytes"] + k["spill_load_bytes"]
        k["smem_ok"] = k["smem_bytes"] <= limit
    compiled = proc.returncode == 0 and bool(kernels)
    spill = sum(k["spill_bytes"] for k in kernels)
    smem_ok = all(k["smem_ok"] for k in kernels)
    ok = compiled and spill == 0 and smem_ok
    errors = []
    if proc.returncode != 0:
        errors.append(f"nvcc exited {proc.returncode}: {log.strip()[-2000:]}")
    elif not kernels:
        errors.append("ptxas reported no kernels")
    if spill:
        errors.append(f"{spill} spill bytes")
    if not smem_ok:
        errors.append(f"smem above the {limit} B per-block limit of {arch}")
    return {
        "ok": ok,
        "arch": arch,
        "nvcc_version": nvcc_version(nvcc),
        "command": cmd,
        "compile_seconds": secs,
        "kernels": kernels,
        "errors": errors,
        "summary": {
            "arch": arch,
            "kernels": len(kernels),
            "spill_bytes": spill,
            "max_registers": max((k["registers"] or 0 for k in kernels), default=0),
            "max_smem_bytes": max((k["smem_bytes"] for k in kernels), default=0),
            "smem_limit_bytes": limit,
            "stack_bytes": max((k["stack_bytes"] for k in kernels), default=0),
        },
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m verify_tools.build_check", description=__doc__.splitlines()[0])
    ap.add_argument("--arch", required=True, choices=ARCHES, help="target: sm_90a (Hopper) or sm_120a (Blackwell)")
    ap.add_argument("--json", action="store_true", help="print one JSON document")
    ap.add_argument("--nvcc", default=None, help="nvcc path (default: $CUDA_HOME/bin/nvcc or PATH)")
    a = ap.parse_args(argv)
    nvcc = (
        a.nvcc
        or shutil.which("nvcc")
        or (os.path.join(os.environ["CUDA_HOME"], "bin", "nvcc") if os.environ.get("CUDA_HOME") else None)
    )
    if not nvcc or not Path(nvcc).exists():
        doc = {
            "ok": False,
            "blocked": "nvcc not found (PATH, CUDA_HOME)",
            "arch": a.arch,
            "kernels": [],
            "summary": {
                "arch": a.arch,
                "kernels": 0,
                "spill_bytes": None,
                "max_registers": None,
                "max_smem_bytes": None,
            },
        }
        code = EXIT_BLOCKED
    else:
        doc = build(a.arch, nvcc)
        code = 0 if doc["ok"] else 1
    if a.json:
        print(json.dumps(doc, indent=1))
    else:
        if doc.get("blocked"):
            print(f"BLOCKED: {doc['blocked']}")
        for k in doc["kernels"]:
            print(
                f"{k['name'][:60]:<60} cfg={k['tile_config'] or '-':<6} regs={k['registers']:>3} "
                f"spill={k['spill_bytes']} stack={k['stack_bytes']} smem={k['smem_bytes']}"
            )
        for e in doc.get("errors", []):
            print("ERROR:", e)
        print(("OK" if doc["ok"] else "FAILED"), json.dumps(doc["summary"]))
    return code


if __name__ == "__main__":
    sys.exit(main())
