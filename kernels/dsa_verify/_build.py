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
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mla_verify._build import (
    PrebuiltUnavailable,
    build_root,
    interpreter_tags,
    prebuilt_only,
    sha256_file,
)

CSRC = Path(__file__).resolve().parent / "csrc"
SOURCES = ("binding.cpp", "dsa_verify.cu")
HEADERS = ("dsa_verify_kernel.cuh", "dsa_verify_launch.h", "dsa_verify_params.h")
ARCHES = ("sm_90a", "sm_120a")
EXT_NAME = "dsa_verify_ext"
LIBRARY_NAME = f"{EXT_NAME}.so"
RECORD_NAME = "build.json"
CXX_FLAGS = ["-O2", "-std=c++17"]
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


def cache_root() -> Path:
    env = os.environ.get("ORCHESTRATOR_KERNEL_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "orchestrator-kernels"


def prebuilt_dir(arch: str) -> Path:
    """<bundle>/build/<arch>/dsa_verify (beside mla_verify's own library and record)."""
    return build_root() / arch / "dsa_verify"


def check_prebuilt(arch: str) -> dict:
    """The prebuilt library's record for `arch`, checked (arch, sources, sha256, Python, torch);
    raises PrebuiltUnavailable naming the reason. Reads files only."""
    d = prebuilt_dir(arch)
    rec_path, lib = d / RECORD_NAME, d / LIBRARY_NAME
    try:
        record = json.loads(rec_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PrebuiltUnavailable(f"prebuilt DSA library missing: no {rec_path} (phase 0 builds it)") from None
    except (OSError, ValueError) as exc:
        raise PrebuiltUnavailable(f"prebuilt record {rec_path} unreadable: {exc}") from None
    if not isinstance(record, dict) or record.get("arch") != arch:
        raise PrebuiltUnavailable(f"prebuilt DSA library record {rec_path} is not for {arch}")
    if record.get("source_hash") != source_hash(arch):
        raise PrebuiltUnavailable(f"prebuilt DSA library was built from other sources ({record.get('source_hash')})")
    if not lib.is_file():
        raise PrebuiltUnavailable(f"prebuilt DSA library missing: {lib}")
    if sha256_file(lib) != record.get("sha256"):
        raise PrebuiltUnavailable(f"prebuilt DSA library hash mismatch: {lib}")
    tags = interpreter_tags()
    for key in ("python", "torch"):
        if record.get(key) != tags[key]:
            raise PrebuiltUnavailable(
                f"prebuilt DSA library was built for {key} {record.get(key)}, running {tags[key]}"
            )
    return {**record, "path": str(lib)}


def load_prebuilt(arch: str):
    key = ("prebuilt", arch)
    if key in _MODULES:
        return _MODULES[key]
    record = check_prebuilt(arch)
    import importlib.machinery
    import importlib.util

    path = record["path"]
    loader = importlib.machinery.ExtensionFileLoader(EXT_NAME, path)
    spec = importlib.util.spec_from_file_location(EXT_NAME, path, loader=loader)
    try:
        mod = importlib.util.module_from_spec(spec)
        loader.exec_module(mod)
    except Exception as exc:
        raise PrebuiltUnavailable(f"prebuilt DSA library {path} failed to load: {type(exc).__name__}: {exc}") from exc
    if not callable(getattr(mod, "fwd", None)):
        raise PrebuiltUnavailable(f"prebuilt DSA library {path} has no fwd()")
    _MODULES[key] = mod
    return mod


_SETUP = r"""
import json, sys
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension
a = json.loads(sys.argv[1])
setup(name=a["name"],
      ext_modules=[CUDAExtension(a["name"], a["sources"], include_dirs=a["include"],
                                 extra_compile_args={"cxx": a["cxx"], "nvcc": a["nvcc"]})],
      cmdclass={"build_ext": BuildExtension},
      script_args=["-q", "build_ext", "--build-lib", a["out"], "--build-temp", a["tmp"]])
"""


def build_prebuilt(arch: str, out_dir: Path | None = None, timeout_s: float = 1800.0) -> dict:
    """Compile the extension for `arch` with this Python's torch in a child process; write the
    library, then its record (by rename, record last: never a record naming a partial file)."""
    flags = nvcc_flags(arch)
    out = Path(out_dir) if out_dir is not None else prebuilt_dir(arch)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="dsav-aot-") as tmp:
        args = {
            "name": EXT_NAME,
            "sources": [str(CSRC / s) for s in SOURCES],
            "include": [str(CSRC)],
            "cxx": CXX_FLAGS,
            "nvcc": flags,
            "out": os.path.join(tmp, "lib"),
            "tmp": os.path.join(tmp, "obj"),
        }
        env = dict(os.environ, TORCH_CUDA_ARCH_LIST={"sm_90a": "9.0a", "sm_120a": "12.0a"}[arch])
        try:
            proc = subprocess.run(
                [sys.executable, "-c", _SETUP, json.dumps(args)],
                capture_output=True,
                text=True,
                timeout=timeout_s,
                env=env,
                cwd=tmp,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            return {"ok": False, "arch": arch, "error": f"extension build ran past {timeout_s:g}s"}
        secs = round(time.time() - t0, 2)
        built = sorted(Path(args["out"]).glob(f"{EXT_NAME}*.so"))
        if proc.returncode != 0 or not built:
            log = (proc.stdout + proc.stderr).strip()
            return {
                "ok": False,
                "arch": arch,
                "seconds": secs,
                "error": f"build exited {proc.returncode}",
                "log_tail": log[-3000:],
            }
        tmp_lib = out / f".{LIBRARY_NAME}.{os.getpid()}.tmp"
        with open(built[0], "rb") as src, open(tmp_lib, "wb") as dst:
            while chunk := src.read(1 << 20):
                dst.write(chunk)
            dst.flush()
            os.fsync(dst.fileno())
    record = {
        "arch": arch,
        "library": LIBRARY_NAME,
        "sha256": sha256_file(tmp_lib),
        "source_hash": source_hash(arch),
        "nvcc_flags": flags,
        "built_at": time.time(),
        "build_seconds": secs,
        **interpreter_tags(),
    }
    rec = out / RECORD_NAME
    try:
        rec.unlink()
    except FileNotFoundError:
        pass
    os.replace(tmp_lib, out / LIBRARY_NAME)
    tmp_rec = out / f".{RECORD_NAME}.{os.getpid()}.tmp"
    with open(tmp_rec, "w", encoding="utf-8") as fh:
        json.dump(record, fh, indent=1, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp_rec, rec)
    return {"ok": True, "path": str(out / LIBRARY_NAME), **record}


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


def load_jit(arch: str):
    """Build (once) and import the extension for `arch` with torch's cpp_extension (development)."""
    return _load_jit(arch, trace=False)


def load_trace(arch: str):
    """The diagnostic build of `arch` (JIT only, never prebuilt): the same kernels plus a per-CTA
    %globaltimer timeline (`fwd_trace`, csrc -DDSAV_TRACE). The shipped library never has it."""
    return _load_jit(arch, trace=True)


def _load_jit(arch: str, trace: bool):
    if prebuilt_only():
        raise PrebuiltUnavailable("JIT build refused: this process is in prebuilt-only mode (a service)")
    key = ("jit-trace" if trace else "jit", arch)
    if key in _MODULES:
        return _MODULES[key]
    from torch.utils import cpp_extension

    digest = source_hash(arch)
    extra = [TRACE_FLAG] if trace else []
    if trace:
        digest = hashlib.sha256((digest + TRACE_FLAG).encode()).hexdigest()[:16]
    build_dir = cache_root() / f"dsa-{digest}"
    build_dir.mkdir(parents=True, exist_ok=True)
    old = os.environ.get("TORCH_CUDA_ARCH_LIST")
    os.environ["TORCH_CUDA_ARCH_LIST"] = {"sm_90a": "9.0a", "sm_120a": "12.0a"}[arch]
    try:
        mod = cpp_extension.load(
            name=f"dsa_verify_{arch}_{digest}{'_trace' if trace else ''}",
            sources=[str(CSRC / s) for s in SOURCES],
            extra_cflags=CXX_FLAGS + extra,
            extra_cuda_cflags=nvcc_flags(arch) + extra,
            extra_include_paths=[str(CSRC)],
            build_directory=str(build_dir),
            verbose=bool(os.environ.get("DSAV_VERBOSE_BUILD")),
        )
    finally:
        if old is None:
            os.environ.pop("TORCH_CUDA_ARCH_LIST", None)
        else:
            os.environ["TORCH_CUDA_ARCH_LIST"] = old
    _MODULES[key] = mod
    return mod
