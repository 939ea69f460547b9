"""JIT build of the DSA verify torch extension and the nvcc/ptxas build check.

`load(arch)` compiles on first use, cached by a hash of the sources and flags under
$ORCHESTRATOR_KERNEL_CACHE or ~/.cache/orchestrator-kernels/<hash>/ (same root as mla_verify).
`build_check(arch)` compiles the kernel translation unit to a cubin with `-Xptxas -v` (no GPU,
no torch) and reports per kernel registers, spills, stack and smem (static + the dynamic bytes
the launcher requests, from tiles.py): ok needs 0 spill bytes and smem within the arch limit.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from . import tiles

CSRC = Path(__file__).resolve().parent / "csrc"
SOURCES = ("binding.cpp", "dsa_verify.cu")
HEADERS = ("dsa_verify_kernel.cuh", "dsa_verify_launch.h", "dsa_verify_params.h")
ARCHES = ("sm_90a", "sm_120a")
_MODULES: dict = {}


def arch_for_capability(major: int, minor: int) -> str:
    """'sm_90a' for compute capability 9.x, 'sm_120a' for 12.x; ValueError otherwise."""
    if major == 9:
        return "sm_90a"
    if major == 12:
        return "sm_120a"
    raise ValueError(f"unsupported compute capability {major}.{minor}: need 9.x (sm_90a) or 12.x (sm_120a)")


def nvcc_flags(arch: str) -> list[str]:
    if arch not in ARCHES:
        raise ValueError(f"arch: must be one of {ARCHES}, got {arch!r}")
    num = arch[3:-1]
    return [
        f"-gencode=arch=compute_{num}a,code=sm_{num}a",
        "-O3",
        "-std=c++17",
        "-lineinfo",
        f"-DDSAV_BUILD_CFG90={1 if arch == 'sm_90a' else 0}",
    ]


def source_hash(arch: str) -> str:
    h = hashlib.sha256()
    for name in SOURCES + HEADERS:
        h.update(name.encode())
        h.update((CSRC / name).read_bytes())
    h.update(" ".join(nvcc_flags(arch)).encode())
    return h.hexdigest()[:16]


def cache_root() -> Path:
    env = os.environ.get("ORCHESTRATOR_KERNEL_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "orchestrator-kernels"


def load(arch: str):
    """Build (once) and import the extension for `arch`; returns the module."""
    if arch in _MODULES:
        return _MODULES[arch]
    from torch.utils import cpp_extension

    digest = source_hash(arch)
    build_dir = cache_root() / f"dsa-{digest}"
    build_dir.mkdir(parents=True, exist_ok=True)
    old = os.environ.get("TORCH_CUDA_ARCH_LIST")
    os.environ["TORCH_CUDA_ARCH_LIST"] = {"sm_90a": "9.0a", "sm_120a": "12.0a"}[arch]
    try:
        mod = cpp_extension.load(
            name=f"dsa_verify_{arch}_{digest}",
            sources=[str(CSRC / s) for s in SOURCES],
            extra_cflags=["-O2", "-std=c++17"],
            extra_cuda_cflags=nvcc_flags(arch),
            extra_include_paths=[str(CSRC)],
            build_directory=str(build_dir),
            verbose=bool(os.environ.get("DSAV_VERBOSE_BUILD")),
        )
    finally:
        if old is None:
            os.environ.pop("TORCH_CUDA_ARCH_LIST", None)
        else:
            os.environ["TORCH_CUDA_ARCH_LIST"] = old
    _MODULES[arch] = mod
    return mod


_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(sm_\w+)'")
_PROPS = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")


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


def find_nvcc(nvcc: str | None = None) -> str | None:
    cand = (
        nvcc
        or shutil.which("nvcc")
        or (os.path.join(os.environ["CUDA_HOME"], "bin", "nvcc") if os.environ.get("CUDA_HOME") else None)
    )
    return cand if cand and Path(cand).exists() else None


def build_check(arch: str, nvcc: str | None = None) -> dict:
    """Compile dsa_verify.cu for `arch` with ptxas -v; one JSON-able document ({"blocked": ...} without nvcc)."""
    flags = nvcc_flags(arch)
    limit = tiles.SMEM_LIMIT[arch]
    exe = find_nvcc(nvcc)
    if exe is None:
        return {"ok": False, "blocked": "nvcc not found (PATH, CUDA_HOME)", "arch": arch, "kernels": []}
    with tempfile.TemporaryDirectory(prefix="dsav-build-") as tmp:
        cmd = [exe, *flags, "-Xptxas", "-v", "-cubin", "-I", str(CSRC), str(CSRC / "dsa_verify.cu")]
        cmd += ["-o", os.path.join(tmp, "dsa_verify.cubin")]
        t0 = time.time()
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        secs = round(time.time() - t0, 2)
    log = proc.stdout + proc.stderr
    kernels = parse_ptxas(log)
    for k in kernels:
        found = tiles.config_for_mangled(k["name"])
        k["tile_config"] = found[0].name if found else None
        k["fp8"] = found[1] if found else None
        k["dynamic_smem_bytes"] = found[0].smem_bytes(found[1]) if found else 0
        k["smem_bytes"] = k["static_smem_bytes"] + k["dynamic_smem_bytes"]
        k["spill_bytes"] = k["spill_store_bytes"] + k["spill_load_bytes"]
        k["smem_ok"] = k["smem_bytes"] <= limit
    want = {(c.name, f) for c in tiles.ARCH_CONFIGS[arch] for f in (False, True)}
    got = {(k["tile_config"], k["fp8"]) for k in kernels if k["tile_config"]}
    spill = sum(k["spill_bytes"] for k in kernels)
    errors = []
    if proc.returncode != 0:
        errors.append(f"nvcc exited {proc.returncode}: {log.strip()[-2000:]}")
    elif not kernels:
        errors.append("ptxas reported no kernels")
    if want - got and proc.returncode == 0:
        errors.append(f"configs missing from the cubin: {sorted(want - got)}")
    if spill:
        errors.append(f"{spill} spill bytes")
    if not all(k["smem_ok"] for k in kernels):
        errors.append(f"smem above the {limit} B per-block limit of {arch}")
    return {
        "ok": not errors,
        "arch": arch,
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
        },
    }
