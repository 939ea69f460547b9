"""JIT build of the torch extension: compiled on first use, cached by a hash of the sources
and flags under $ORCHESTRATOR_KERNEL_CACHE or ~/.cache/orchestrator-kernels/<hash>/."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

CSRC = Path(__file__).resolve().parent / "csrc"
SOURCES = ("binding.cpp", "mla_verify.cu")
HEADERS = ("mla_verify_kernel.cuh", "mla_verify_wgmma.cuh", "mla_verify_launch.h", "mla_verify_params.h")
_MODULES: dict = {}


def arch_for_capability(major: int, minor: int) -> str:
    """'sm_90a' for compute capability 9.x, 'sm_120a' for 12.x; ValueError otherwise."""
    if major == 9:
        return "sm_90a"
    if major == 12:
        return "sm_120a"
    raise ValueError(f"unsupported compute capability {major}.{minor}: need 9.x (sm_90a) or 12.x (sm_120a)")


def nvcc_flags(arch: str) -> list[str]:
    num = arch[3:-1]  # "90" / "120"
    return [
        f"-gencode=arch=compute_{num}a,code=sm_{num}a",
        "-O3",
        "-std=c++17",
        "-lineinfo",
        f"-DMLAV_BUILD_CFG90={1 if arch == 'sm_90a' else 0}",
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
    build_dir = cache_root() / digest
    build_dir.mkdir(parents=True, exist_ok=True)
    old = os.environ.get("TORCH_CUDA_ARCH_LIST")
    os.environ["TORCH_CUDA_ARCH_LIST"] = {"sm_90a": "9.0a", "sm_120a": "12.0a"}[arch]
    try:
        mod = cpp_extension.load(
            name=f"mla_verify_{arch}_{digest}",
            sources=[str(CSRC / s) for s in SOURCES],
            extra_cflags=["-O2", "-std=c++17"],
            extra_cuda_cflags=nvcc_flags(arch),
            extra_include_paths=[str(CSRC)],
            build_directory=str(build_dir),
            verbose=bool(os.environ.get("MLAV_VERBOSE_BUILD")),
        )
    finally:
        if old is None:
            os.environ.pop("TORCH_CUDA_ARCH_LIST", None)
        else:
            os.environ["TORCH_CUDA_ARCH_LIST"] = old
    _MODULES[arch] = mod
    return mod
