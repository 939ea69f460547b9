"""Building and loading the torch extension: ahead of time for services, JIT for development.

Two ways to get the compiled module for an arch:

- **Prebuilt** (every service process): phase 0 runs :func:`build_prebuilt` on the host, with
  the service's Python and torch, which writes ``<bundle>/build/<arch>/mla_verify_ext.so`` and
  ``<bundle>/build/<arch>/build.json`` (its sha256, the source hash, torch/Python versions).
  :func:`load_prebuilt` checks that record against the file and the running interpreter and
  imports the library with ``importlib`` (no nvcc, ninja, writable HOME or build lock);
  anything missing or different raises :class:`PrebuiltUnavailable` naming the reason. The
  bundle hash never covers ``build/`` (kernels/MANIFEST lists sources only; the bundler skips
  ``build`` folders), so building does not change the bundle.
- **JIT** (development only): :func:`load` compiles on first use with torch's
  ``cpp_extension.load`` into $ORCHESTRATOR_KERNEL_CACHE or ~/.cache/orchestrator-kernels/<hash>/
  (torch's build lock there has no timeout). When the process is in prebuilt-only mode
  (:func:`require_prebuilt`, or ``MLA_VERIFY_PREBUILT_ONLY=1`` in the environment, which the
  SGLang plugin sets in every service process) :func:`load` never compiles: it loads the
  prebuilt library or raises.
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

CSRC = Path(__file__).resolve().parent / "csrc"
BUNDLE_ROOT = Path(__file__).resolve().parents[1]  # kernels/ here; <remote_root>/bundles/<sha> on a host
SOURCES = ("binding.cpp", "mla_verify.cu")
HEADERS = (
    "mla_verify_kernel.cuh",
    "mla_verify_wgmma.cuh",
    "mla_verify_wgmma_ws.cuh",
    "wgmma_sm90.cuh",
    "wgmma_tile_sm90.cuh",
    "fp8_e4m3.cuh",
    "mla_verify_launch.h",
    "pdl_launch.h",
    "mla_verify_params.h",
)
EXT_NAME = "mla_verify_ext"  # TORCH_EXTENSION_NAME of the prebuilt library (PyInit_mla_verify_ext)
LIBRARY_NAME = f"{EXT_NAME}.so"
RECORD_NAME = "build.json"
PREBUILT_ENV = "MLA_VERIFY_PREBUILT_ONLY"
BUILD_DIR_ENV = "MLA_VERIFY_BUILD_DIR"  # overrides <bundle>/build (tests, read-only bundles)
TORCH_ARCH = {"sm_90a": "9.0a", "sm_120a": "12.0a"}
_MODULES: dict = {}


class PrebuiltUnavailable(ImportError):
    """The prebuilt library cannot be used in this process; ``str()`` is the reason."""


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


CXX_FLAGS = ["-O2", "-std=c++17"]


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


# ----------------------------------------------------------------------------- prebuilt


def prebuilt_only() -> bool:
    """True in a service process: :func:`load` must never compile."""
    return (os.environ.get(PREBUILT_ENV) or "").strip().lower() in ("1", "true", "yes", "on")


def require_prebuilt() -> None:
    """Put this process (and the processes it spawns) in prebuilt-only mode."""
    os.environ[PREBUILT_ENV] = "1"


def build_root() -> Path:
    env = os.environ.get(BUILD_DIR_ENV)
    return Path(env) if env else BUNDLE_ROOT / "build"


def prebuilt_dir(arch: str) -> Path:
    return build_root() / arch


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def interpreter_tags() -> dict:
    """What a compiled extension is bound to: the Python ABI and the torch build."""
    tags = {"python": f"{sys.version_info.major}.{sys.version_info.minor}", "torch": None, "torch_cuda": None}
    torch = sys.modules.get("torch")
    if torch is None:
        import torch  # the service has imported it already; phase 0 imports it to build
    tags["torch"] = str(torch.__version__)
    tags["torch_cuda"] = getattr(torch.version, "cuda", None)
    return tags


def check_record(d: Path, arch: str, ext_name: str, want_source_hash: str, label: str = "library") -> dict:
    """The prebuilt ``label`` in folder ``d`` (``<ext_name>.so`` + build.json), checked for ``arch``;
    raises PrebuiltUnavailable with the reason. Shared by mla_verify and dsa_verify.

    Checks, in order: the record exists and parses, names this arch and these sources
    (``want_source_hash``), the library exists and its sha256 equals the record's, and it was
    built for this Python and torch. Reads files only: no compiler, no lock.
    """
    rec_path, lib = d / RECORD_NAME, d / f"{ext_name}.so"
    try:
        record = json.loads(rec_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PrebuiltUnavailable(
            f"prebuilt {label} missing: no {rec_path} (phase 0 builds it: python -m verify_tools.build_check "
            f"--arch {arch} --library)"
        ) from None
    except (OSError, ValueError) as exc:
        raise PrebuiltUnavailable(f"prebuilt record {rec_path} unreadable: {exc}") from None
    if not isinstance(record, dict):
        raise PrebuiltUnavailable(f"prebuilt record {rec_path} is not a JSON object")
    if record.get("arch") != arch:
        raise PrebuiltUnavailable(f"prebuilt {label} is for {record.get('arch')}, this GPU needs {arch}")
    if record.get("source_hash") != want_source_hash:
        raise PrebuiltUnavailable(
            f"prebuilt {label} was built from other sources (source_hash {record.get('source_hash')}, "
            f"bundle has {want_source_hash})"
        )
    if not lib.is_file():
        raise PrebuiltUnavailable(f"prebuilt {label} missing: {lib}")
    got = sha256_file(lib)
    if got != record.get("sha256"):
        raise PrebuiltUnavailable(
            f"prebuilt {label} hash mismatch: {lib} has sha256 {got[:16]}, {RECORD_NAME} says "
            f"{str(record.get('sha256'))[:16]}"
        )
    tags = interpreter_tags()
    for key in ("python", "torch"):
        if record.get(key) != tags[key]:
            raise PrebuiltUnavailable(
                f"prebuilt {label} was built for {key} {record.get(key)}, this process runs {key} {tags[key]}"
            )
    return {**record, "path": str(lib)}


def import_library(path: str, ext_name: str, label: str = "library"):
    """Import the extension file ``path`` (module ``ext_name``) with importlib; it must have fwd()."""
    import importlib.machinery
    import importlib.util

    loader = importlib.machinery.ExtensionFileLoader(ext_name, path)
    spec = importlib.util.spec_from_file_location(ext_name, path, loader=loader)
    try:
        mod = importlib.util.module_from_spec(spec)
        loader.exec_module(mod)
    except Exception as exc:  # dlopen errors (missing libtorch_cuda, ABI) come back as ImportError
        raise PrebuiltUnavailable(f"prebuilt {label} {path} failed to load: {type(exc).__name__}: {exc}") from exc
    if not callable(getattr(mod, "fwd", None)):
        raise PrebuiltUnavailable(f"prebuilt {label} {path} has no fwd()")
    return mod


def check_prebuilt(arch: str) -> dict:
    """The prebuilt library's record for ``arch``, checked (:func:`check_record`)."""
    return check_record(prebuilt_dir(arch), arch, EXT_NAME, source_hash(arch))


def load_prebuilt(arch: str):
    """Import the checked prebuilt library for ``arch`` (cached per process)."""
    key = ("prebuilt", arch)
    if key in _MODULES:
        return _MODULES[key]
    mod = import_library(check_prebuilt(arch)["path"], EXT_NAME)
    _MODULES[key] = mod
    return mod


_SETUP = r"""
import json, sys
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension
a = json.loads(sys.argv[1])
setup(
    name=a["name"],
    ext_modules=[CUDAExtension(a["name"], a["sources"], include_dirs=a["include"],
                               extra_compile_args={"cxx": a["cxx"], "nvcc": a["nvcc"]})],
    cmdclass={"build_ext": BuildExtension},
    script_args=["-q", "build_ext", "--build-lib", a["out"], "--build-temp", a["tmp"]],
)
"""


def compile_library(
    arch: str,
    *,
    ext_name: str,
    csrc: Path,
    sources: tuple[str, ...],
    nvcc: list[str],
    want_source_hash: str,
    out: Path,
    timeout_s: float,
    jobs: int | None = None,
) -> dict:
    """Compile ``ext_name`` for ``arch`` with this Python's torch; write ``out/<ext_name>.so`` and
    its build.json. Shared by mla_verify and dsa_verify.

    Uses torch's public ``CUDAExtension``/``BuildExtension`` in a child process (its compiler
    output stays out of our stdout) and a fresh temporary build folder (no shared lock). The
    library and ``build.json`` are written by rename, the record last, so a build killed at any
    point leaves either the previous pair or no record: never a record naming a partial file.
    Returns a document: ok, arch, path, sha256, seconds, and the log tail on failure.
    """
    if arch not in TORCH_ARCH:
        raise ValueError(f"arch must be one of {sorted(TORCH_ARCH)}, got {arch!r}")
    library_name = f"{ext_name}.so"
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix=f"{ext_name}-aot-") as tmp:
        args = {
            "name": ext_name,
            "sources": [str(csrc / s) for s in sources],
            "include": [str(csrc)],
            "cxx": CXX_FLAGS,
            "nvcc": nvcc,
            "out": os.path.join(tmp, "lib"),
            "tmp": os.path.join(tmp, "obj"),
        }
        env = dict(os.environ)
        env["TORCH_CUDA_ARCH_LIST"] = TORCH_ARCH[arch]
        if jobs:
            env["MAX_JOBS"] = str(jobs)
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
        log = (proc.stdout + proc.stderr).strip()
        built = sorted(Path(args["out"]).glob(f"{ext_name}*.so"))
        if proc.returncode != 0 or not built:
            return {
                "ok": False,
                "arch": arch,
                "seconds": secs,
                "error": f"extension build exited {proc.returncode}" + ("" if built else ", no library produced"),
                "log_tail": log[-3000:],
            }
        lib = out / library_name
        tmp_lib = out / f".{library_name}.{os.getpid()}.tmp"
        with open(built[0], "rb") as src, open(tmp_lib, "wb") as dst:
            while chunk := src.read(1 << 20):
                dst.write(chunk)
            dst.flush()
            os.fsync(dst.fileno())
    digest = sha256_file(tmp_lib)
    record = {
        "arch": arch,
        "library": library_name,
        "sha256": digest,
        "size_bytes": tmp_lib.stat().st_size,
        "source_hash": want_source_hash,
        "nvcc_flags": nvcc,
        "built_at": time.time(),
        "build_seconds": secs,
        **interpreter_tags(),
    }
    rec = out / RECORD_NAME
    # The old record goes first: between the two renames no record names a file it does not match.
    try:
        rec.unlink()
    except FileNotFoundError:
        pass
    os.replace(tmp_lib, lib)
    tmp_rec = out / f".{RECORD_NAME}.{os.getpid()}.tmp"
    with open(tmp_rec, "w", encoding="utf-8") as fh:
        json.dump(record, fh, indent=1, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp_rec, rec)
    return {"ok": True, "path": str(lib), "record": str(rec), "seconds": secs, **record}


def build_prebuilt(arch: str, out_dir: Path | None = None, timeout_s: float = 1800.0, jobs: int | None = None) -> dict:
    """Compile the extension for ``arch`` into ``out_dir`` (default :func:`prebuilt_dir`) with its
    record (:func:`compile_library`; ValueError for an arch it cannot build)."""
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


# ----------------------------------------------------------------------------- load


def load(arch: str):
    """The extension module for ``arch``.

    Prebuilt-only mode (service processes): the checked prebuilt library, else
    :class:`PrebuiltUnavailable`. Otherwise (development): a valid prebuilt library if there
    is one, else a JIT build (once per process) with torch's ``cpp_extension.load``.
    """
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


def compile_jit(
    arch: str,
    *,
    name: str,
    csrc: Path,
    sources: tuple[str, ...],
    nvcc: list[str],
    extra: list[str],
    build_dir: Path,
    verbose: bool,
):
    """torch ``cpp_extension.load`` of ``sources`` for ``arch`` into ``build_dir`` (development
    only; TORCH_CUDA_ARCH_LIST set for the build and restored). Shared by mla_verify and dsa_verify."""
    from torch.utils import cpp_extension

    build_dir.mkdir(parents=True, exist_ok=True)
    old = os.environ.get("TORCH_CUDA_ARCH_LIST")
    os.environ["TORCH_CUDA_ARCH_LIST"] = TORCH_ARCH[arch]
    try:
        return cpp_extension.load(
            name=name,
            sources=[str(csrc / s) for s in sources],
            extra_cflags=CXX_FLAGS + extra,
            extra_cuda_cflags=nvcc + extra,
            extra_include_paths=[str(csrc)],
            build_directory=str(build_dir),
            verbose=verbose,
        )
    finally:
        if old is None:
            os.environ.pop("TORCH_CUDA_ARCH_LIST", None)
        else:
            os.environ["TORCH_CUDA_ARCH_LIST"] = old


def compile_tree(
    arch: str,
    csrc_dir,
    *,
    prefix: str,
    sources: tuple[str, ...],
    headers: tuple[str, ...],
    nvcc: list[str],
    extra: list[str],
):
    """JIT build of another copy of a kernel's csrc/ (an older commit's, or a variant's) for a same-process
    A/B (development only; bench --tree-ab, dsa_tree_ab): named and cached by a digest of the tree's sources
    and headers (paths relative to csrc/; an older tree may lack a newer header) and the flags."""
    d = Path(csrc_dir).resolve()
    h = hashlib.sha256()
    for name in sources + headers:
        if (d / name).exists():
            h.update(name.encode())
            h.update((d / name).read_bytes())
    h.update(" ".join(nvcc + extra).encode())
    digest = h.hexdigest()[:16]
    return compile_jit(
        arch,
        name=f"{prefix}_{arch}_{digest}_tree",
        csrc=d,
        sources=sources,
        nvcc=nvcc,
        extra=extra,
        build_dir=cache_root() / f"{prefix}-tree-{digest}",
        verbose=False,
    )


def load_jit(arch: str):
    """Compile (once, cached by source hash) and import the extension; development only."""
    if prebuilt_only():
        raise PrebuiltUnavailable("JIT build refused: this process is in prebuilt-only mode (a service)")
    key = ("jit", arch)
    if key in _MODULES:
        return _MODULES[key]
    digest = source_hash(arch)
    mod = compile_jit(
        arch,
        name=f"mla_verify_{arch}_{digest}",
        csrc=CSRC,
        sources=SOURCES,
        nvcc=nvcc_flags(arch),
        extra=[],
        build_dir=cache_root() / digest,
        verbose=bool(os.environ.get("MLAV_VERBOSE_BUILD")),
    )
    _MODULES[key] = mod
    return mod
