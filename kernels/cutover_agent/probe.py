"""Probe the host's SGLang integration surface before the plugin is staged (phase 3).

``python -m cutover_agent.probe --json [--service-python PATH]`` imports the installed
sglang (in this interpreter, or in the service's interpreter when given) and checks every
attribute and signature the plugin relies on. It fails closed: anything missing, renamed
or unimportable is a named entry in ``mismatches`` and ``compatible`` is false (exit 1).
No sglang at all: ``{"ok": false, "blocked": ...}``, exit 75.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import importlib.metadata
import inspect
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_BLOCKED = 0, 1, 2, 75
TESTED_VERSIONS = ("0.5.23",)
EXTEND_ARGS = (
    "q_extend",
    "k_extend",
    "v_extend",
    "o_extend",
    "k_buffer",
    "v_buffer",
    "qo_indptr",
    "kv_indptr",
    "kv_indices",
    "custom_mask",
    "is_causal",
    "mask_indptr",
    "max_len_extend",
)
EXTEND_KWARGS = ("k_scale", "v_scale", "sm_scale", "logit_cap")
EXTEND_MODULES = (
    "sglang.kernels.ops.attention.extend_attention",
    "sglang.srt.layers.attention.triton_ops.extend_attention",
)
METADATA_FIELDS = ("qo_indptr", "kv_indptr", "kv_indices", "custom_mask", "mask_indptr", "max_extend_len")
HOOK_NAMES = ("use_verify_shared_kv", "use_verify_splitkv", "verify_shared_kv_fwd")
LOADER_DIST = "orchestrator-mla-verify-loader"


class Probe:
    """Collects named checks; a failed check is a mismatch."""

    def __init__(self) -> None:
        self.checks: dict[str, bool] = {}
        self.mismatches: list[str] = []

    def check(self, name: str, fn: Callable[[], Any]) -> Any:
        try:
            result = fn()
        except Exception as exc:  # fail closed: any error is a named mismatch
            self.checks[name] = False
            self.mismatches.append(f"{name}: {type(exc).__name__}: {exc}")
            return None
        self.checks[name] = True
        return result


def _params(fn: Any) -> list[str]:
    return list(inspect.signature(fn).parameters)


def _require(cond: bool, msg: str) -> None:
    if not cond:
        raise AssertionError(msg)


def _sglang_version(sglang: Any) -> str:
    """The imported package's own ``__version__`` (what is loaded), else its dist metadata."""
    version = getattr(sglang, "__version__", None)
    if version:
        return str(version)
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def run_probe() -> dict[str, Any]:
    """Check the surface in this interpreter; return the probe document."""
    try:
        sglang = importlib.import_module("sglang")
    except ImportError as exc:
        return {
            "ok": False,
            "blocked": f"sglang is not installed here ({exc})",
            "compatible": False,
            "sglang_version": None,
            "mismatches": ["sglang: not importable"],
        }
    p = Probe()
    version = _sglang_version(sglang)

    def registry() -> None:
        mod = importlib.import_module("sglang.srt.layers.attention.attention_registry")
        backends = mod.ATTENTION_BACKENDS
        _require(isinstance(backends, dict), "ATTENTION_BACKENDS is not a dict")
        _require("triton" in backends, "no 'triton' entry in ATTENTION_BACKENDS")

    def plugins() -> None:
        mod = importlib.import_module("sglang.srt.plugins")
        _require(callable(getattr(mod, "load_plugins", None)), "no load_plugins()")
        group = getattr(mod, "GENERAL_PLUGINS_GROUP", "sglang.srt.plugins")
        _require(group == "sglang.srt.plugins", f"plugin group is {group!r}")

    def backend_class() -> Any:
        mod = importlib.import_module("sglang.srt.layers.attention.triton_backend")
        return mod.TritonAttnBackend

    p.check("attention_registry.ATTENTION_BACKENDS['triton']", registry)
    p.check("plugins.load_plugins", plugins)
    cls = p.check("triton_backend.TritonAttnBackend", backend_class)
    route = None
    if cls is not None:
        p.check(
            "TritonAttnBackend.forward_extend(q, k, v, layer, forward_batch, save_kv_cache)",
            lambda: _require(
                _params(cls.forward_extend)[:7] == ["self", "q", "k", "v", "layer", "forward_batch", "save_kv_cache"],
                f"parameters are {_params(cls.forward_extend)[:7]}",
            ),
        )
        p.check(
            "TritonAttnBackend.init_cuda_graph_state(max_bs, max_num_tokens)",
            lambda: _require(
                _params(cls.init_cuda_graph_state)[:3] == ["self", "max_bs", "max_num_tokens"],
                f"parameters are {_params(cls.init_cuda_graph_state)[:3]}",
            ),
        )
        p.check(
            "TritonAttnBackend.init_forward_metadata",
            lambda: _require(callable(getattr(cls, "init_forward_metadata", None)), "missing"),
        )
        try:
            init_src = inspect.getsource(cls.__init__)
            fe_src = inspect.getsource(cls.forward_extend)
            hook = all(n in init_src for n in HOOK_NAMES) and all(n in fe_src for n in HOOK_NAMES[0::2])
        except (OSError, TypeError):
            hook = False
        route = "hook" if hook else "forward_extend"

    def forward_metadata() -> None:
        mod = importlib.import_module("sglang.srt.layers.attention.triton_backend")
        fields = {f.name for f in dataclasses.fields(mod.ForwardMetadata)}
        missing = [f for f in METADATA_FIELDS if f not in fields]
        _require(not missing, f"fields missing: {missing}")

    def forward_mode() -> None:
        mod = importlib.import_module("sglang.srt.model_executor.forward_batch_info")
        fm = mod.ForwardMode
        _require(
            hasattr(fm, "TARGET_VERIFY") and callable(getattr(fm, "is_target_verify", None)),
            "no TARGET_VERIFY / is_target_verify",
        )

    def extend_signature() -> str:
        errors = []
        for name in EXTEND_MODULES:
            try:
                fn = importlib.import_module(name).extend_attention_fwd
            except (ImportError, AttributeError) as exc:
                errors.append(f"{name}: {exc}")
                continue
            params = _params(fn)
            _require(tuple(params[:13]) == EXTEND_ARGS, f"first 13 parameters are {params[:13]}")
            missing = [k for k in EXTEND_KWARGS if k not in params]
            _require(not missing, f"keywords missing: {missing}")
            return name
        raise ImportError("; ".join(errors))

    p.check("triton_backend.ForwardMetadata fields", forward_metadata)
    p.check("ForwardMode.TARGET_VERIFY", forward_mode)
    extend_module = p.check("extend_attention_fwd signature", extend_signature)

    try:
        eps = [
            e
            for e in importlib.metadata.entry_points(group="sglang.srt.plugins")
            if e.dist is not None and e.dist.name == LOADER_DIST
        ]
    except Exception:  # informational only
        eps = []
    compatible = not p.mismatches
    return {
        "ok": compatible,
        "compatible": compatible,
        "sglang_version": version,
        "version_tested": version in TESTED_VERSIONS,
        "tested_versions": list(TESTED_VERSIONS),
        "verify_route": route,
        "extend_attention_module": extend_module,
        "mismatches": p.mismatches,
        "checks": p.checks,
        "plugin_installed": bool(eps),
        "python": sys.executable,
    }


def probe_in(service_python: str, timeout_s: float) -> tuple[dict[str, Any], int]:
    """Run this probe inside another interpreter (the service's), from this bundle."""
    bundle_root = str(Path(__file__).resolve().parent.parent)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [bundle_root, env.get("PYTHONPATH")]))
    try:
        proc = subprocess.run(
            [service_python, "-m", "cutover_agent.probe", "--json"],
            cwd=bundle_root,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except FileNotFoundError:
        return {
            "ok": False,
            "compatible": False,
            "sglang_version": None,
            "mismatches": [f"service python {service_python}: not found"],
        }, EXIT_FAILED
    except subprocess.TimeoutExpired:
        return {
            "ok": False,
            "compatible": False,
            "sglang_version": None,
            "mismatches": [f"probe in {service_python} ran past {timeout_s}s"],
        }, EXIT_FAILED
    lines = proc.stdout.strip().splitlines()
    try:
        doc = json.loads(lines[-1])
        return doc, proc.returncode
    except (IndexError, json.JSONDecodeError):
        tail = proc.stderr.strip().splitlines()[-1:] or ["no output"]
        return {
            "ok": False,
            "compatible": False,
            "sglang_version": None,
            "mismatches": [f"probe in {service_python} failed (exit {proc.returncode}): {tail[0]}"],
        }, EXIT_FAILED


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cutover_agent.probe", description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--service-python", help="probe the sglang installed for this interpreter")
    parser.add_argument("--timeout", type=float, default=300.0)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return EXIT_USAGE if exc.code else EXIT_OK
    if args.service_python:
        doc, code = probe_in(args.service_python, args.timeout)
        doc["service_python"] = args.service_python
    else:
        doc = run_probe()
        code = EXIT_BLOCKED if doc.get("blocked") else (EXIT_OK if doc["compatible"] else EXIT_FAILED)
    if args.json:
        print(json.dumps(doc, sort_keys=True))
    else:
        print(f"sglang {doc.get('sglang_version')}: {'compatible' if doc.get('compatible') else 'NOT compatible'}")
        for m in doc.get("mismatches", []):
            print(f"  mismatch: {m}")
        if doc.get("blocked"):
            print(f"  blocked: {doc['blocked']}")
    return code


if __name__ == "__main__":
    sys.exit(main())
