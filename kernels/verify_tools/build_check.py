"""Build check (phase 0): nvcc-compile the kernel sources for one arch and report ptxas resources.

Usage: python -m verify_tools.build_check --arch sm_120a|sm_90a [--json] [--nvcc PATH]
       python -m verify_tools.build_check --arch ARCH --library [--out-dir DIR] [--json]

``--library`` (run with the SERVICE's Python: the library is bound to its torch) builds the
loadable extension ahead of time into ``<bundle>/build/<arch>/mla_verify_ext.so`` with its
record ``build.json`` (sha256, source hash, torch/Python versions; mla_verify/_build.py), then
loads it in a fresh child process exactly as a service does (prebuilt-only mode: no compiler,
no lock) and reports ``library.sha256``, ``library.loadable`` and the times; the same for the
DSA route's library (``<bundle>/build/<arch>/dsa_verify/``, reported as ``dsa_library.*``;
dsa_verify/_build.py). ``build/`` is not part of the bundle hash. Exit 0 built and loadable, 1 not, 75 nvcc or torch missing.

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
from mla_verify._build import BUILD_DIR_ENV, CSRC, PREBUILT_ENV, nvcc_flags, prebuilt_dir
from tool_contract import EXIT_BLOCKED, emit

ARCHES = ("sm_90a", "sm_120a")

_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(sm_\w+)'")
_FUNC = re.compile(r"Function properties for (\S+)")
_PROPS = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")
_TPL = re.compile(r"mla_verify_split_kernelILi(\d+)ELi(\d+)ELi(\d+)E")


def parse_ptxas(text: str) -> list[dict]:
    """Per-kernel resources from `ptxas -v` output (entry order preserved). A kernel's spill bytes
    include those of the non-inlined device functions ptxas compiles within its entry (their
    "Function properties for <callee>" lines, named in ``callees``); its stack is its own frame."""
    kernels: list[dict] = []
    cur = None
    owner = None  # the function the next properties line belongs to
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
                "callees": [],
            }
            kernels.append(cur)
            owner = cur["name"]
            continue
        if cur is None:
            continue
        m = _FUNC.search(line)
        if m:
            owner = m.group(1)
            continue
        m = _PROPS.search(line)
        if m:
            stack, st, ld = map(int, m.groups())
            if owner in (None, cur["name"]):
                cur["stack_bytes"] = stack
            else:
                cur["callees"].append(owner)
            cur["spill_store_bytes"] += st
            cur["spill_load_bytes"] += ld
        m = _USED.search(line)
        if m:
            cur["registers"] = int(m.group(1))
            s = _SMEM.search(line)
            if s:
                cur["static_smem_bytes"] = int(s.group(1))
    return kernels


def dynamic_smem(name: str) -> tuple[int, str | None]:
    """Dynamic smem the launcher requests for a kernel, and its tile config name (None: combine)."""
    if "mla_verify_split_wgmma_ws_fp8_kernel" in name:
        return tiles.SM90WG_WS_FP8_SMEM_BYTES, tiles.SM90WG.name
    if "mla_verify_split_wgmma_ws_kernel" in name:
        return tiles.SM90WG_WS_SMEM_BYTES, tiles.SM90WG.name
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


def ptxas_report(nvcc: str, arch: str, flags: list[str], csrc: Path, source: str, limit: int, smem_of) -> dict:
    """nvcc-compile ``csrc/source`` to a cubin with ``-Xptxas -v`` (no GPU, no torch) and read the
    per-kernel resources: registers, spills, stack, static smem + ``smem_of(kernel)`` (the
    kernel's dynamic bytes; it may add fields to the kernel entry), ``smem_ok`` against
    ``limit``. ``errors`` covers nvcc failing, no kernels, spills and smem; ``ok`` is no errors.
    Shared by the dense (:func:`build`) and the DSA (:func:`dsa_build`) checks."""
    stem = Path(source).stem
    with tempfile.TemporaryDirectory(prefix=f"{stem}-build-") as tmp:
        cmd = [nvcc, *flags, "-Xptxas", "-v", "-cubin", "-I", str(csrc), str(csrc / source)]
        cmd += ["-o", os.path.join(tmp, f"{stem}.cubin")]
        t0 = time.time()
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        secs = round(time.time() - t0, 2)
    log = proc.stdout + proc.stderr
    kernels = parse_ptxas(log)
    for k in kernels:
        k["dynamic_smem_bytes"] = smem_of(k)
        k["smem_bytes"] = k["static_smem_bytes"] + k["dynamic_smem_bytes"]
        k["spill_bytes"] = k["spill_store_bytes"] + k["spill_load_bytes"]
        k["smem_ok"] = k["smem_bytes"] <= limit
    spill = sum(k["spill_bytes"] for k in kernels)
    errors = []
    if proc.returncode != 0:
        errors.append(f"nvcc exited {proc.returncode}: {log.strip()[-2000:]}")
    elif not kernels:
        errors.append("ptxas reported no kernels")
    if spill:
        errors.append(f"{spill} spill bytes")
    if not all(k["smem_ok"] for k in kernels):
        errors.append(f"smem above the {limit} B per-block limit of {arch}")
    return {
        "ok": not errors,
        "returncode": proc.returncode,
        "command": cmd,
        "compile_seconds": secs,
        "kernels": kernels,
        "errors": errors,
        "summary": {
            "kernels": len(kernels),
            "spill_bytes": spill,
            "max_registers": max((k["registers"] or 0 for k in kernels), default=0),
            "max_smem_bytes": max((k["smem_bytes"] for k in kernels), default=0),
            "smem_limit_bytes": limit,
        },
    }


def build(arch: str, nvcc: str) -> dict:
    """The dense kernel's check: ``mla_verify/csrc/mla_verify.cu`` for ``arch`` (:func:`ptxas_report`;
    a kernel's dynamic smem from the tile config in its mangled name)."""

    def smem_of(k: dict) -> int:
        dyn, cfg = dynamic_smem(k["name"])
        k["tile_config"] = cfg
        return dyn

    rep = ptxas_report(nvcc, arch, nvcc_flags(arch), CSRC, "mla_verify.cu", tiles.SMEM_LIMIT[arch], smem_of)
    kernels = rep["kernels"]
    return {
        "ok": rep["ok"],
        "arch": arch,
        "nvcc_version": nvcc_version(nvcc),
        "command": rep["command"],
        "compile_seconds": rep["compile_seconds"],
        "kernels": kernels,
        "errors": rep["errors"],
        "summary": {
            "arch": arch,
            **rep["summary"],
            "stack_bytes": max((k["stack_bytes"] for k in kernels), default=0),
        },
    }


_LOAD_CHECK = r"""
import importlib, json, sys, time
t0 = time.time()
import torch
_build = importlib.import_module(sys.argv[2] + "._build")
t1 = time.time()
arch = sys.argv[1]
doc = {"torch_import_seconds": round(t1 - t0, 3), "prebuilt_only": _build.prebuilt_only()}
try:
    mod = _build.load(arch)
    doc.update(loadable=True, load_seconds=round(time.time() - t1, 3), has_fwd=callable(getattr(mod, "fwd", None)))
except ImportError as exc:
    doc.update(loadable=False, load_error=f"{type(exc).__name__}: {exc}")
print(json.dumps(doc))
"""


def cuda_home(nvcc: str) -> str | None:
    """The CUDA root of ``nvcc`` (a folder with bin/nvcc and include/cuda_runtime.h), or None."""
    cands = [Path(nvcc).resolve().parent.parent, Path("/usr/local/cuda")]
    return next((str(c) for c in cands if (c / "include" / "cuda_runtime.h").is_file()), None)


#: The kernels whose loadable libraries phase 0 builds: the dense route's and the DSA route's.
LIBRARY_KERNELS = ("mla_verify", "dsa_verify")


def library(arch: str, nvcc: str, out_dir: str | None, timeout_s: float, kernel: str = "mla_verify") -> dict:
    """Build `kernel`'s prebuilt library (mla_verify: <out>/, dsa_verify: <out>/dsa_verify/, out =
    --out-dir or <bundle>/build/<arch>), then load it in a service-like child process."""
    import importlib

    _build = importlib.import_module(f"{kernel}._build")
    if out_dir and kernel != "mla_verify":
        out_dir = str(Path(out_dir) / kernel)
    # torch's BuildExtension finds nvcc through CUDA_HOME (a CPU-only torch never guesses it).
    if not os.environ.get("CUDA_HOME"):
        home = cuda_home(nvcc)
        if home:
            os.environ["CUDA_HOME"] = home
    env = dict(os.environ)
    built = _build.build_prebuilt(arch, out_dir=Path(out_dir) if out_dir else None, timeout_s=timeout_s)
    lib = {
        "built": bool(built.get("ok")),
        "path": built.get("path"),
        "sha256": built.get("sha256"),
        "size_bytes": built.get("size_bytes"),
        "build_seconds": built.get("seconds", built.get("build_seconds")),
        "source_hash": built.get("source_hash"),
        "torch": built.get("torch"),
        "python": built.get("python"),
        "loadable": False,
        "load_error": None,
    }
    errors = [] if built.get("ok") else [built.get("error", "build failed") + ": " + built.get("log_tail", "")[-1500:]]
    if built.get("ok"):
        child_env = {**env, PREBUILT_ENV: "1"}
        if out_dir:  # <build root>/<arch>[/dsa_verify]: the loader finds it under BUILD_DIR_ENV
            arch_dir = Path(out_dir).resolve() if kernel == "mla_verify" else Path(out_dir).resolve().parent
            child_env[BUILD_DIR_ENV] = str(arch_dir.parent)
        try:
            proc = subprocess.run(
                [sys.executable, "-c", _LOAD_CHECK, arch, kernel],
                capture_output=True,
                text=True,
                timeout=300,
                env=child_env,
                cwd=str(Path(_build.__file__).resolve().parents[1]),
                stdin=subprocess.DEVNULL,
            )
            got = json.loads(proc.stdout.strip().splitlines()[-1])
        except (subprocess.TimeoutExpired, IndexError, ValueError) as exc:
            got = {"loadable": False, "load_error": f"load check failed: {type(exc).__name__}: {exc}"}
        lib.update({k: got[k] for k in ("loadable", "load_error", "load_seconds", "torch_import_seconds") if k in got})
        if not lib["loadable"]:
            errors.append(f"the prebuilt library does not load in prebuilt-only mode: {lib['load_error']}")
    return {
        "ok": lib["built"] and lib["loadable"],
        "arch": arch,
        "library": lib,
        "errors": errors,
        "summary": {"arch": arch, "library_built": lib["built"], "library_loadable": lib["loadable"]},
    }


def libraries(arch: str, nvcc: str, out_dir: str | None, timeout_s: float) -> dict:
    """Both routes' prebuilt libraries (:data:`LIBRARY_KERNELS`), each built and load-checked:
    ``library`` (mla_verify, the dense route) and ``dsa_library`` (dsa_verify, the DSA route; its
    summary keys are prefixed ``dsa_``). ok only when every one built and loads."""
    doc: dict = {"ok": True, "arch": arch, "errors": [], "summary": {"arch": arch}}
    for kernel in LIBRARY_KERNELS:
        one = library(arch, nvcc, out_dir, timeout_s, kernel=kernel)
        prefix = "" if kernel == "mla_verify" else "dsa_"
        doc[f"{prefix}library"] = one["library"]
        doc["errors"] += [f"{kernel}: {e}" for e in one["errors"]]
        doc["summary"].update({f"{prefix}{k}": v for k, v in one["summary"].items() if k != "arch"})
        doc["ok"] = doc["ok"] and one["ok"]
    return doc


def library_if_cuda_torch(arch: str, nvcc: str, out_dir: str | None, timeout_s: float) -> dict:
    """The ptxas check's companion: build the loadable library when this interpreter's torch has
    CUDA (the library is bound to it); otherwise say why it was not built (``library.skipped``).
    Not ok only when a build was possible and failed. The service checks the library's torch and
    Python against its own at load, so one built by another interpreter is declined, named."""
    try:
        import torch
    except ImportError as exc:
        why = f"torch is not importable in {sys.executable} ({exc})"
    else:
        if getattr(torch.version, "cuda", None):
            return libraries(arch, nvcc, out_dir, timeout_s)
        why = f"torch {torch.__version__} in {sys.executable} has no CUDA (cpp_extension cannot build or link it)"
    lib = {"built": False, "loadable": False, "skipped": f"{why}: no loadable library built here", "sha256": None}
    return {
        "ok": True,
        "library": lib,
        "dsa_library": dict(lib),
        "errors": [],
        "summary": {
            "library_built": False,
            "library_loadable": False,
            "dsa_library_built": False,
            "dsa_library_loadable": False,
        },
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m verify_tools.build_check", description=__doc__.splitlines()[0])
    ap.add_argument("--arch", required=True, choices=ARCHES, help="target: sm_90a (Hopper) or sm_120a (Blackwell)")
    ap.add_argument("--json", action="store_true", help="print one JSON document")
    ap.add_argument("--nvcc", default=None, help="nvcc path (default: $CUDA_HOME/bin/nvcc or PATH)")
    ap.add_argument(
        "--library", action="store_true", help="build the loadable extension ahead of time (service python)"
    )
    ap.add_argument(
        "--out-dir", default=None, help="with --library: folder for the library (default <bundle>/build/<arch>)"
    )
    ap.add_argument("--timeout", type=float, default=1800.0, help="library build time limit in seconds")
    ap.add_argument("--no-library", action="store_true", help="ptxas check only (no loadable library)")
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
    elif a.library:
        try:
            import torch  # noqa: F401 - the library is built against this interpreter's torch
        except ImportError as exc:
            doc = {
                "ok": False,
                "blocked": f"torch is not importable in {sys.executable} ({exc}): run --library with the service python",
                "arch": a.arch,
                "library": {"built": False, "loadable": False, "path": str(prebuilt_dir(a.arch))},
                "summary": {"arch": a.arch, "library_built": False, "library_loadable": False},
            }
            code = EXIT_BLOCKED
        else:
            doc = libraries(a.arch, nvcc, a.out_dir, a.timeout)
            code = 0 if doc["ok"] else 1
    else:
        doc = build(a.arch, nvcc)
        add_dsa_build(doc, a.arch, nvcc)
        if not a.no_library:
            lib_doc = library_if_cuda_torch(a.arch, nvcc, a.out_dir, a.timeout)
            doc["library"], doc["dsa_library"] = lib_doc["library"], lib_doc["dsa_library"]
            doc["errors"] += lib_doc["errors"]
            doc["summary"].update({k: v for k, v in lib_doc["summary"].items() if k != "arch"})
            doc["ok"] = doc["ok"] and lib_doc["ok"]
        code = 0 if doc["ok"] else 1
    return emit(doc, a.json, code, human=_print_report)


def dsa_build(arch: str, nvcc: str, experimental: bool = False) -> dict:
    """Compile ``dsa_verify/csrc/dsa_verify.cu`` (the sparse DSA verify kernel) for ``arch`` to a
    cubin with ``-Xptxas -v`` (no GPU, no torch; :func:`ptxas_report`); per kernel registers,
    spills, stack and smem (static + the dynamic bytes its launcher asks for, from
    ``dsa_verify.tiles``). ``ok`` needs every tile config present (bf16 and fp8; fp8 only for the
    fp8-only ones), 0 spill bytes and smem within the arch's limit. ``experimental`` (tests and
    development only, never phase 0): the experimental build, whose configs must be present too."""
    from dsa_verify import tiles as dsa_tiles
    from dsa_verify._build import CSRC as DSA_CSRC
    from dsa_verify._build import EXPERIMENTAL_FLAG
    from dsa_verify._build import nvcc_flags as dsa_nvcc_flags

    def smem_of(k: dict) -> int:
        found = dsa_tiles.config_for_mangled(k["name"])
        k["tile_config"] = found[0].name if found else None
        k["fp8"] = found[1] if found else None
        return found[0].smem_bytes(found[1]) if found else 0

    flags = dsa_nvcc_flags(arch) + ([EXPERIMENTAL_FLAG] if experimental else [])
    rep = ptxas_report(nvcc, arch, flags, DSA_CSRC, "dsa_verify.cu", dsa_tiles.SMEM_LIMIT[arch], smem_of)
    kernels, errors = rep["kernels"], rep["errors"]
    want = {(c.name, f) for c in dsa_tiles.ARCH_CONFIGS[arch] for f in c.kv_kinds}
    if experimental and arch == "sm_90a":
        want |= {(c.name, f) for c in dsa_tiles.EXPERIMENTAL_CONFIGS.values() for f in c.kv_kinds}
    got = {(k["tile_config"], k["fp8"]) for k in kernels if k["tile_config"]}
    if want - got and rep["returncode"] == 0:  # after a "no kernels" error, before the spill one
        errors.insert(0 if kernels else 1, f"configs missing from the cubin: {sorted(want - got)}")
    return {
        "ok": not errors,
        "arch": arch,
        "command": rep["command"],
        "compile_seconds": rep["compile_seconds"],
        "kernels": kernels,
        "errors": errors,
        "summary": {"arch": arch, **rep["summary"]},
    }


def add_dsa_build(doc: dict, arch: str, nvcc: str) -> None:
    """Compile the sparse (DSA) verify kernel too (:func:`dsa_build`): its report
    under ``doc["dsa"]``, its errors prefixed ``dsa_verify:`` in ``doc["errors"]``, and
    ``summary.dsa_kernels`` / ``summary.dsa_spill_bytes`` (phase 0 gates on the latter)."""
    dsa = dsa_build(arch, nvcc)
    doc["dsa"] = {k: dsa.get(k) for k in ("ok", "compile_seconds", "kernels", "errors", "summary")}
    doc["errors"] += [f"dsa_verify: {e}" for e in dsa.get("errors", [])]
    summary = dsa.get("summary") or {}
    doc["summary"]["dsa_kernels"] = summary.get("kernels", 0)
    doc["summary"]["dsa_spill_bytes"] = summary.get("spill_bytes")
    doc["summary"]["dsa_max_smem_bytes"] = summary.get("max_smem_bytes")
    doc["ok"] = doc["ok"] and bool(dsa.get("ok"))


def _print_report(doc: dict) -> None:
    for key in ("library", "dsa_library"):
        if key in doc:
            print(key, json.dumps(doc[key], indent=1))
    for k in doc.get("kernels", []):
        print(
            f"{k['name'][:60]:<60} cfg={k['tile_config'] or '-':<6} regs={k['registers']:>3} "
            f"spill={k['spill_bytes']} stack={k['stack_bytes']} smem={k['smem_bytes']}"
        )
    for e in doc.get("errors", []):
        print("ERROR:", e)
    print(("OK" if doc["ok"] else "FAILED"), json.dumps(doc["summary"]))


if __name__ == "__main__":
    sys.exit(main())
