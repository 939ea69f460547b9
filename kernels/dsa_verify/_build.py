"""Building and loading the DSA verify torch extension.

- Prebuilt (service processes): `build_prebuilt(arch)` (phase 0, with the service's Python and
  torch) writes `<bundle>/build/<arch>/dsa_verify/dsa_verify_ext.so` and its `build.json`
  record (sha256, source hash, Python/torch versions); `load_prebuilt(arch)` checks the record
  against the file and the interpreter and imports it with importlib (no compiler). In
  prebuilt-only mode (`MLA_VERIFY_PREBUILT_ONLY=1`, which the SGLang plugin sets in every
  service process; mla_verify._build.prebuilt_only) `load` never compiles: it loads the
  prebuilt library or raises PrebuiltUnavailable (the plugin then falls back to SGLang).
- JIT (development): `load(arch)` otherwise compiles on first use, cached by a hash of the
  sources and flags under $ORCHESTRATOR_KERNEL_CACHE or ~/.cache/orchestrator-kernels/dsa-<hash>/.
The nvcc/ptxas build check of these sources is phase 0's tool: `verify_tools.build_check.dsa_build`.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from mla_verify._build import (
    RECORD_NAME,  # noqa: F401 - re-exported: the record's file name beside LIBRARY_NAME
    PrebuiltUnavailable,
    build_root,
    cache_root,
    check_record,
    compile_jit,
    compile_library,
    import_library,
    prebuilt_only,
    sha256_file,  # noqa: F401 - re-exported beside check_prebuilt (the record's sha256)
)

CSRC = Path(__file__).resolve().parent / "csrc"
SOURCES = ("binding.cpp", "dsa_verify.cu")
# paths relative to CSRC; the wgmma primitives are the dense kernel's (one owner: mla_verify/csrc)
HEADERS = (
    "dsa_verify_kernel.cuh",
    "dsa_verify_n8.cuh",
    "dsa_verify_wgmma.cuh",
    "../../mla_verify/csrc/wgmma_sm90.cuh",
    "../../mla_verify/csrc/wgmma_tile_sm90.cuh",
    "../../mla_verify/csrc/fp8_e4m3.cuh",
    "../../mla_verify/csrc/pdl_launch.h",
    "dsa_verify_launch.h",
    "dsa_verify_params.h",
)
ARCHES = ("sm_90a", "sm_120a")
EXT_NAME = "dsa_verify_ext"
LIBRARY_NAME = f"{EXT_NAME}.so"
LABEL = "DSA library"  # how its errors name it
_MODULES: dict = {}


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


def prebuilt_dir(arch: str) -> Path:
    """<bundle>/build/<arch>/dsa_verify (beside mla_verify's own library and record)."""
    return build_root() / arch / "dsa_verify"


def check_prebuilt(arch: str) -> dict:
    """The prebuilt library's record for `arch`, checked (mla_verify._build.check_record: arch,
    sources, sha256, Python, torch); raises PrebuiltUnavailable naming the reason."""
    return check_record(prebuilt_dir(arch), arch, EXT_NAME, source_hash(arch), label=LABEL)


def load_prebuilt(arch: str):
    key = ("prebuilt", arch)
    if key in _MODULES:
        return _MODULES[key]
    mod = import_library(check_prebuilt(arch)["path"], EXT_NAME, label=LABEL)
    _MODULES[key] = mod
    return mod


def build_prebuilt(arch: str, out_dir: Path | None = None, timeout_s: float = 1800.0, jobs: int | None = None) -> dict:
    """Compile the extension for `arch` with this Python's torch (mla_verify._build.compile_library:
    library, then its record, each by rename)."""
    return compile_library(
        arch,
        ext_name=EXT_NAME,
        csrc=CSRC,
        sources=SOURCES,
        nvcc=nvcc_flags(arch),
        want_source_hash=source_hash(arch),
        out=Path(out_dir) if out_dir is not None else prebuilt_dir(arch),
        timeout_s=timeout_s,
        jobs=jobs,
    )


def load(arch: str):
    """The extension for `arch`: prebuilt-only mode -> the checked prebuilt library or
    PrebuiltUnavailable; otherwise a valid prebuilt library if present, else a JIT build."""
    if prebuilt_only():
        return load_prebuilt(arch)
    if arch in _MODULES:
        return _MODULES[arch]
    try:
        mod = load_prebuilt(arch)
    except PrebuiltUnavailable:
        mod = load_jit(arch)
    _MODULES[arch] = mod
    return mod


TRACE_FLAG = "-DDSAV_TRACE=1"
EXPERIMENTAL_FLAG = "-DDSAV_EXPERIMENTAL=1"


def load_jit(arch: str):
    """Build (once) and import the extension for `arch` with torch's cpp_extension (development)."""
    return _load_jit(arch, "")


def load_trace(arch: str):
    """The diagnostic build of `arch` (JIT only, never prebuilt): the same kernels and the
    experimental ones (as load_experimental) plus a per-CTA %globaltimer timeline (`fwd_trace`,
    csrc -DDSAV_TRACE). The shipped library never has it."""
    return _load_jit(arch, TRACE_FLAG)


def load_experimental(arch: str):
    """The experimental build of `arch` (JIT only, never prebuilt, never phase 0's check): the
    shipped kernels plus tiles.EXPERIMENTAL_CONFIGS (csrc -DDSAV_EXPERIMENTAL), for A/B runs."""
    return _load_jit(arch, EXPERIMENTAL_FLAG)


def _load_jit(arch: str, flag: str):
    if prebuilt_only():
        raise PrebuiltUnavailable("JIT build refused: this process is in prebuilt-only mode (a service)")
    tag = {"": "", TRACE_FLAG: "_trace", EXPERIMENTAL_FLAG: "_exp"}[flag]
    key = ("jit" + tag, arch)
    if key in _MODULES:
        return _MODULES[key]
    digest = source_hash(arch)
    extra = {"": [], TRACE_FLAG: [TRACE_FLAG, EXPERIMENTAL_FLAG], EXPERIMENTAL_FLAG: [EXPERIMENTAL_FLAG]}[flag]
    if flag:
        digest = hashlib.sha256((digest + " ".join(extra)).encode()).hexdigest()[:16]
    mod = compile_jit(
        arch,
        name=f"dsa_verify_{arch}_{digest}{tag}",
        csrc=CSRC,
        sources=SOURCES,
        nvcc=nvcc_flags(arch),
        extra=extra,
        build_dir=cache_root() / f"dsa-{digest}",
        verbose=bool(os.environ.get("DSAV_VERBOSE_BUILD")),
    )
    _MODULES[key] = mod
    return mod
