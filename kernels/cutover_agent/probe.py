"""Probe the host's SGLang integration surface before the plugin is staged (phase 3).

``python -m cutover_agent.probe --json [--service-python PATH] [--root R] [--launch-args-json J]``
imports the installed sglang (in this interpreter, or in the service's interpreter when given)
and checks every attribute and signature the plugin relies on. It fails closed: anything
missing, renamed or unimportable is a named entry in ``mismatches`` and ``compatible`` is false
(exit 1). No sglang at all: ``{"ok": false, "blocked": ...}``, exit 75.

It then resolves, with SGLang's own ``prepare_server_args`` + ``ServerArgs.resolve_once`` (the
launcher's resolution: model overrides from the model's ``config.json``, platform defaults; no
weights are read), which attention backend will serve target verify, the page size and the
KV cache dtype for the service's launch arguments, and says whether the dense plugin engages
(``plugin_engages``) or why not, with the flags that would make it engage (re-resolved with
those flags to confirm). The launch arguments (what follows ``python -m sglang.launch_server``)
come from ``--launch-args-json``, else ``<root>/service_launch_args.json`` (a JSON list), else
the command line of the running ``sglang.launch_server`` / ``sglang serve`` process on this
host. ``ok`` needs both: a compatible surface and a plugin that engages.

``library_loadable`` says whether the prebuilt kernel library (phase 0) loads in this
interpreter on this host's GPU the way a service process loads it (None: no torch or no GPU
here, with the reason); phase 3 gates on it separately.

Model family (issue 14): the resolution also says which route the host needs. A model SGLang
serves with its ``dsa`` backend (``GlmMoeDsaForCausalLM`` with ``index_topk``: GLM-5,
DeepSeek-V3.2) is ``dsa``; a 512+64 MLA model on the other backends (DeepSeek-V3/R1, Kimi K2) is
``dense_mla``. ``--model-family dense_mla|dsa`` (the inventory's value) is checked against it
(a mismatch does not engage); ``auto`` takes the derived one. ``plugin_engages`` is then judged
for that family's route: dense -> the ``triton`` backend with bf16 KV and page size 1; dsa ->
the ``dsa`` backend whose decode impl (which serves verify) is one the plugin overrides
(flashinfer_sparse_mla, fa3, flashmla_kv), bf16 or fp8_e4m3 KV, 512-dim latent + 64 rope, no
pooled index (page size 64). ``library_loadable`` checks that family's prebuilt library
(``mla_verify`` or ``dsa_verify``). ``--family-only`` prints just the resolution and the
derived family (phase 0's facts use it for ``model_family: auto`` hosts).
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

from mla_verify.inputs import KERNEL_ARGS as EXTEND_ARGS  # extend_attention_fwd's first 13 parameters
from tool_contract import EXIT_FAILED, EXIT_OK, EXIT_USAGE, exit_code

TESTED_VERSIONS = ("0.5.23",)
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


LAUNCH_ARGS_NAME = "service_launch_args.json"
MODEL_FAMILIES = ("dense_mla", "dsa")
#: DeepseekSparseAttnBackend decode impls (target verify runs the decode impl) the dsa route overrides.
DSA_VERIFY_IMPLS = ("flashinfer_sparse_mla", "fa3", "flashmla_kv")
DSA_KV_DTYPES = ("bfloat16", "fp8_e4m3")
DSA_PAGE_SIZE = 64  # 64 * index_kpool; the route reads physical slot ids with kpool 1 only
#: The DeepseekSparseAttnBackend methods (parameter lists, after self) the dsa route overrides.
DSA_METHODS: dict[str, tuple[str, ...]] = {
    "forward_extend": ("q", "k", "v", "layer", "forward_batch", "save_kv_cache"),
    "_forward_flashinfer_sparse_mla": (
        "q_all",
        "kv_cache",
        "page_table_1",
        "seq_lens",
        "sm_scale",
        "skip_softmax_threshold_scale_factor",
    ),
    "_forward_fa3": (
        "q_rope",
        "kv_cache",
        "v_head_dim",
        "q_nope",
        "page_table",
        "cache_seqlens",
        "cu_seqlens_q",
        "cu_seqlens_k",
        "max_seqlen_q",
        "sm_scale",
        "logit_cap",
        "page_size",
    ),
    "_forward_flashmla_kv": ("q_all", "kv_cache", "v_head_dim", "sm_scale", "layer", "metadata", "page_table_1"),
}
DENSE_FLAGS = ["--attention-backend", "triton"]
DENSE_FLAGS_DECODE_ONLY = ["--decode-attention-backend", "triton", "--speculative-attention-mode", "decode"]
KERNEL_KV_DTYPES = ("bfloat16", "fp8_e4m3")  # the dense kernel's caches (sglang_verify_plugin.verify_hook)
#: SGLang platform facts (sglang.srt.runtime_context.override_platform) of the GPUs the kernel is
#: built for. Used ONLY with --emulate-gpu: CPU tests resolve as if on that GPU; a host resolves
#: with its real platform.
EMULATED_GPUS: dict[str, dict[str, Any]] = {
    "sm90": {
        "is_cuda": True,
        "is_hip": False,
        "is_sm90": True,
        "is_hopper_with_cuda_12_3": True,
        "is_sm100": False,
        "is_sm100_or_sm110": False,
        "is_sm110": False,
        "is_sm120": False,
        "is_blackwell": False,
        "has_flashinfer": False,
        "device_sm": 90,
        "device_capability": (9, 0),
    },
    "sm120": {
        "is_cuda": True,
        "is_hip": False,
        "is_sm90": False,
        "is_hopper_with_cuda_12_3": False,
        "is_sm100": False,
        "is_sm100_or_sm110": False,
        "is_sm110": False,
        "is_sm120": True,
        "is_blackwell": True,
        "has_flashinfer": False,
        "device_sm": 120,
        "device_capability": (12, 0),
    },
}


def running_launch_args(proc_root: str = "/proc") -> tuple[list[str] | None, str]:
    """The argv of the running SGLang server on this host (after the launcher), and where from."""
    found: dict[tuple, int] = {}
    try:
        pids = [p for p in os.listdir(proc_root) if p.isdigit()]
    except OSError:
        return None, f"{proc_root} not readable"
    for pid in pids:
        try:
            with open(os.path.join(proc_root, pid, "cmdline"), "rb") as fh:
                argv = [a.decode(errors="replace") for a in fh.read().split(b"\0") if a]
        except OSError:
            continue
        for i, a in enumerate(argv):
            if a == "sglang.launch_server" and i > 0 and argv[i - 1] == "-m":
                found.setdefault(tuple(argv[i + 1 :]), int(pid))
                break
            if a.endswith("sglang") and argv[i + 1 : i + 2] == ["serve"]:
                found.setdefault(tuple(argv[i + 2 :]), int(pid))
                break
    if len(found) == 1:
        (args, pid), *_ = found.items()
        return list(args), f"command line of pid {pid}"
    if not found:
        return None, "no running sglang.launch_server / sglang serve process"
    return None, f"{len(found)} SGLang servers with different arguments run here (pids {sorted(found.values())})"


def find_launch_args(explicit: str | None, root: str | None) -> tuple[list[str] | None, str]:
    """The service's launch arguments and their source, or (None, why they are unknown)."""
    if explicit:
        args = json.loads(explicit)
        if not (isinstance(args, list) and all(isinstance(a, str) for a in args)):
            raise ValueError("--launch-args-json must be a JSON list of strings")
        return args, "--launch-args-json"
    if root:
        path = Path(root) / LAUNCH_ARGS_NAME
        if path.is_file():
            args = json.loads(path.read_text(encoding="utf-8"))
            if not (isinstance(args, list) and all(isinstance(a, str) for a in args)):
                raise ValueError(f"{path} must hold a JSON list of strings")
            return args, str(path)
    args, why = running_launch_args()
    if args is not None:
        return args, why
    where = f"{Path(root) / LAUNCH_ARGS_NAME}, " if root else ""
    return None, f"service launch arguments unknown ({why}): write {where}or pass --launch-args-json"


def _resolve(launch_args: list[str], emulate: str | None) -> dict[str, Any]:
    """SGLang's own resolution of ``launch_args``; the fields that decide the verify route."""
    import contextlib

    argv = list(launch_args)
    ctx: Any = contextlib.nullcontext()
    if emulate:
        import torch

        facts = EMULATED_GPUS[emulate]
        torch.cuda.get_device_capability = lambda *a, **k: facts["device_capability"]
        from sglang.srt.runtime_context import override_platform

        ctx = override_platform(**facts)
        if "--device" not in argv:
            argv += ["--device", "cuda"]
    from sglang.srt.arg_groups.model_override_base import attention_backends_of, model_config_of, resolved_view
    from sglang.srt.server_args import prepare_server_args

    with ctx:
        args = prepare_server_args(argv)
        args.resolve_once()
        view = resolved_view(args)
        prefill, decode = attention_backends_of(view)
        mc = model_config_of(args)
    mode = getattr(view, "speculative_attention_mode", None) or "prefill"
    kv = str(getattr(view, "kv_cache_dtype", None) or "auto")
    dtype = str(getattr(mc, "dtype", "") or "").replace("torch.", "")
    return {
        "model_path": getattr(view, "model_path", None),
        "architectures": list(getattr(mc.hf_config, "architectures", None) or []),
        "attention_arch": getattr(getattr(mc, "attention_arch", None), "name", None),
        "kv_lora_rank": getattr(mc, "kv_lora_rank", None),
        "qk_rope_head_dim": getattr(mc, "qk_rope_head_dim", None),
        "index_topk": getattr(mc.hf_config, "index_topk", None),
        "attention_backend": getattr(view, "attention_backend", None),
        "prefill_attention_backend": prefill,
        "decode_attention_backend": decode,
        "speculative_algorithm": getattr(view, "speculative_algorithm", None),
        "speculative_attention_mode": mode,
        # SGLang runs target verify on the prefill backend unless --speculative-attention-mode decode.
        "verify_backend": decode if mode == "decode" else prefill,
        "page_size": getattr(view, "page_size", None),
        "kv_cache_dtype": kv,
        "kv_cache_dtype_effective": dtype if kv == "auto" else kv,
        "dsa_prefill_backend": getattr(view, "dsa_prefill_backend", None),
        "dsa_decode_backend": getattr(view, "dsa_decode_backend", None),
    }


def _drop_flag(argv: list[str], flag: str) -> list[str]:
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a == flag:
            skip = True
            continue
        if a.startswith(flag + "="):
            continue
        out.append(a)
    return out


def derived_family(r: dict[str, Any]) -> str | None:
    """``dsa`` (SGLang's dsa backend: index_topk), ``dense_mla`` (512+64 MLA), else None."""
    if r.get("attention_backend") == "dsa" or r.get("index_topk"):
        return "dsa"
    if r.get("attention_arch") == "MLA" and r.get("kv_lora_rank") == 512 and r.get("qk_rope_head_dim") == 64:
        return "dense_mla"
    return None


def dsa_verdict(r: dict[str, Any]) -> tuple[list[str], list[str], bool]:
    """(reasons the dsa route does not engage, flags that would make it, whether it can at all)."""
    reasons, flags = [], []
    if not r.get("speculative_algorithm"):
        reasons.append("no --speculative-algorithm: this server never runs target verify")
    if r.get("attention_backend") != "dsa":
        reasons.append(
            f"attention backend {r.get('attention_backend')}: the dsa route replaces only SGLang's dsa backend"
        )
        return reasons, [], False
    if r.get("kv_lora_rank") != 512 or r.get("qk_rope_head_dim") != 64:
        reasons.append(
            f"kv_lora_rank {r.get('kv_lora_rank')}, rope {r.get('qk_rope_head_dim')}: the DSA kernel is 512+64 only"
        )
        return reasons, [], False
    impl = r.get("dsa_decode_backend")
    if impl not in DSA_VERIFY_IMPLS:
        reasons.append(
            f"target verify runs the {impl} dsa impl (SGLang's pick for these flags); the dsa route overrides "
            f"{', '.join(DSA_VERIFY_IMPLS)}"
        )
    kv = r.get("kv_cache_dtype_effective")
    if kv not in DSA_KV_DTYPES:
        reasons.append(f"kv cache dtype {kv}: the DSA kernel reads bf16 or fp8_e4m3 (656-byte rows) only")
        flags += ["--kv-cache-dtype", "bfloat16"]
    if r.get("page_size") != DSA_PAGE_SIZE:
        reasons.append(
            f"page_size {r.get('page_size')} (index kpool > 1): the DSA kernel reads page-64 physical slot ids"
        )
    return reasons, flags, True


def serving_verdict(r: dict[str, Any], family: str | None = None) -> tuple[list[str], list[str], bool]:
    """(reasons the plugin's route for ``family`` (default: the derived one) does not engage,
    flags that would make it, whether it can at all)."""
    derived = derived_family(r)
    family = family or derived
    if family == "dsa":
        if derived != "dsa":
            return [f"the inventory says model_family dsa, but SGLang resolves this model as {derived}"], [], False
        return dsa_verdict(r)
    reasons, flags = [], []
    if not r.get("speculative_algorithm"):
        reasons.append("no --speculative-algorithm: this server never runs target verify")
    if derived == "dsa":
        reasons.append(
            f"DSA model ({', '.join(r.get('architectures') or ['?'])}, index_topk {r.get('index_topk')}): SGLang "
            f"serves it with the dsa backend (page_size {r.get('page_size')}, verify on "
            f"{r.get('dsa_decode_backend')}); the dense route replaces only the triton backend and cannot serve "
            "it (the host's model_family must be dsa or auto)"
        )
        return reasons, [], False
    if r.get("attention_arch") != "MLA" or r.get("kv_lora_rank") != 512 or r.get("qk_rope_head_dim") != 64:
        reasons.append(
            f"not a 512+64 MLA model (attention {r.get('attention_arch')}, kv_lora_rank {r.get('kv_lora_rank')}, "
            f"rope {r.get('qk_rope_head_dim')}): the kernel is absorbed-MLA 576/512 only"
        )
        return reasons, [], False
    if r.get("verify_backend") != "triton":
        reasons.append(
            f"target verify runs on the {r.get('verify_backend')} backend (SGLang's pick for these flags), "
            "not triton: the plugin replaces only the triton backend"
        )
        flags += DENSE_FLAGS
    if r.get("kv_cache_dtype_effective") not in KERNEL_KV_DTYPES:
        reasons.append(
            f"kv cache dtype {r.get('kv_cache_dtype_effective')}: the bundled kernel reads bf16 or fp8_e4m3 only"
        )
        flags += ["--kv-cache-dtype", "bfloat16"]
    if r.get("page_size") not in (None, 1):
        reasons.append(f"page_size {r.get('page_size')}: the kernel reads page_size-1 token slot indices")
        flags += ["--page-size", "1"]
    return reasons, flags, True


def resolve_serving(launch_args: list[str], emulate: str | None = None, family: str | None = None) -> dict[str, Any]:
    """Which backend/page size/KV dtype the service will get, and whether the plugin's route for
    ``family`` (None: the derived one) engages."""
    try:
        r = _resolve(launch_args, emulate)
    except BaseException as exc:  # SystemExit from argparse too: fail closed, named
        if isinstance(exc, KeyboardInterrupt):
            raise
        return {
            "resolved": False,
            "plugin_engages": False,
            "reasons": [f"SGLang could not resolve the launch arguments: {type(exc).__name__}: {exc}"],
            "engage_flags": [],
            "launch_args": launch_args,
            "model_family_derived": None,
        }
    reasons, flags, possible = serving_verdict(r, family)
    doc = {
        "resolved": True,
        **r,
        "launch_args": launch_args,
        "model_family_derived": derived_family(r),
        "plugin_engages": not reasons,
        "reasons": reasons,
    }
    doc["engage_flags"] = flags
    doc["engage_flags_verified"] = None
    if reasons and possible and flags:
        fixed = list(launch_args)
        for f in flags[0::2]:
            fixed = _drop_flag(fixed, f)
        fixed += flags
        try:
            again = serving_verdict(_resolve(fixed, emulate), family)[0]
        except BaseException as exc:  # noqa: BLE001 - the suggestion is reported unverified
            if isinstance(exc, KeyboardInterrupt):
                raise
            again = [f"{type(exc).__name__}: {exc}"]
        only_spec = [x for x in again if x.startswith("no --speculative-algorithm")]
        doc["engage_flags_verified"] = again == only_spec
        doc["engage_flags_remaining_reasons"] = again
    return doc


def library_check(family: str | None = None) -> dict[str, Any]:
    """Does the prebuilt kernel library phase 0 built for ``family``'s route (``mla_verify``, or
    ``dsa_verify`` for dsa) load HERE (the service's Python and torch, this host's GPU), exactly
    as each service process will (hash, sources, arch, torch, Python)?"""
    try:
        import torch
    except ImportError as exc:
        return {"loadable": None, "reason": f"torch is not importable in {sys.executable} ({exc})"}
    if not torch.cuda.is_available():
        return {
            "loadable": None,
            "reason": f"no CUDA device visible to {sys.executable}: the library cannot be checked",
        }
    kernel = "dsa_verify" if family == "dsa" else "mla_verify"
    try:
        from mla_verify._build import arch_for_capability

        _build = importlib.import_module(f"{kernel}._build")
        arch = arch_for_capability(*torch.cuda.get_device_capability())
        _build.load_prebuilt(arch)
        rec = _build.check_prebuilt(arch)
    except (ImportError, ValueError) as exc:
        return {"loadable": False, "kernel": kernel, "reason": str(exc)}
    return {
        "loadable": True,
        "kernel": kernel,
        **{k: rec.get(k) for k in ("arch", "path", "sha256", "torch", "python")},
    }


def dsa_surface(p: Probe) -> None:
    """The dsa route's seam: ATTENTION_BACKENDS['dsa'] and the overridden methods' parameters."""

    def registry() -> None:
        mod = importlib.import_module("sglang.srt.layers.attention.attention_registry")
        _require("dsa" in mod.ATTENTION_BACKENDS, "no 'dsa' entry in ATTENTION_BACKENDS")

    p.check("attention_registry.ATTENTION_BACKENDS['dsa']", registry)
    cls = p.check(
        "dsa_backend.DeepseekSparseAttnBackend",
        lambda: importlib.import_module("sglang.srt.layers.attention.dsa_backend").DeepseekSparseAttnBackend,
    )
    if cls is None:
        return
    for name, want in DSA_METHODS.items():

        def method(name: str = name, want: tuple[str, ...] = want) -> None:
            got = tuple(_params(getattr(cls, name))[1 : 1 + len(want)])
            _require(got == want, f"parameters are {list(got)}")

        p.check(f"DeepseekSparseAttnBackend.{name}({', '.join(want)})", method)


def run_probe(
    launch_args: list[str] | None = None,
    launch_source: str | None = None,
    emulate: str | None = None,
    model_family: str = "auto",
) -> dict[str, Any]:
    """Check the surface in this interpreter; return the probe document. ``model_family``: the
    inventory's value (dense_mla, dsa) or ``auto`` (take the one SGLang's resolution implies)."""
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
    expected = None if model_family == "auto" else model_family
    if launch_args is None:
        serving = {
            "resolved": False,
            "plugin_engages": False,
            "reasons": [launch_source or "service launch arguments unknown"],
            "engage_flags": [],
            "model_family_derived": None,
        }
    else:
        serving = resolve_serving(launch_args, emulate, expected)
        serving["launch_args_source"] = launch_source
    derived = serving.get("model_family_derived")
    family = expected or derived
    if expected is not None and derived is not None and derived != expected:
        serving["plugin_engages"] = False
        mismatch = f"the inventory says model_family {expected}, SGLang resolves this model as {derived}"
        if not any("the inventory says" in x for x in serving["reasons"]):
            serving["reasons"] = [*serving["reasons"], mismatch]
    if family == "dsa":
        dsa_surface(p)
    compatible = not p.mismatches
    engages = bool(serving.get("plugin_engages"))
    library = library_check(family)
    return {
        "model_family": family,
        "model_family_requested": model_family,
        "model_family_derived": derived,
        "route": {"dsa": "dsa", "dense_mla": "triton"}.get(family or ""),
        "library": library,
        "library_loadable": library.get("loadable"),
        "ok": compatible and engages,
        "compatible": compatible,
        "plugin_engages": engages,
        "serving": serving,
        "serving_reasons": serving.get("reasons", []),
        "engage_flags": serving.get("engage_flags", []),
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


def family_only(launch_args: list[str] | None, launch_source: str | None, emulate: str | None) -> dict[str, Any]:
    """The derived model family alone: ``ok`` when SGLang resolved the launch arguments."""
    try:
        importlib.import_module("sglang")
    except Exception as exc:  # noqa: BLE001 - any import failure: no family, with the reason
        return {
            "ok": False,
            "blocked": f"sglang is not importable here ({type(exc).__name__}: {exc})"[:400],
            "model_family": None,
        }
    if launch_args is None:
        return {"ok": False, "model_family": None, "reason": launch_source or "service launch arguments unknown"}
    try:
        r = _resolve(launch_args, emulate)
    except BaseException as exc:  # SystemExit from argparse too
        if isinstance(exc, KeyboardInterrupt):
            raise
        return {"ok": False, "model_family": None, "reason": f"SGLang could not resolve: {type(exc).__name__}: {exc}"}
    family = derived_family(r)
    return {
        "ok": family is not None,
        "model_family": family,
        "reason": None if family else "neither a DSA nor a 512+64 MLA model: no bundled route serves it",
        "architectures": r.get("architectures"),
        "attention_backend": r.get("attention_backend"),
        "index_topk": r.get("index_topk"),
        "launch_args_source": launch_source,
    }


def probe_in(service_python: str, timeout_s: float, extra: list[str] | None = None) -> tuple[dict[str, Any], int]:
    """Run this probe inside another interpreter (the service's), from this bundle."""
    bundle_root = str(Path(__file__).resolve().parent.parent)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [bundle_root, env.get("PYTHONPATH")]))
    try:
        proc = subprocess.run(
            [service_python, "-m", "cutover_agent.probe", "--json", *(extra or [])],
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
    parser.add_argument("--root", help=f"the host's remote_root (reads {LAUNCH_ARGS_NAME} there)")
    parser.add_argument("--launch-args-json", help="the service's SGLang launch arguments as a JSON list")
    parser.add_argument(
        "--model-family",
        choices=[*MODEL_FAMILIES, "auto"],
        default="auto",
        help="the inventory's model family: the route to judge (auto: the one SGLang's resolution implies)",
    )
    parser.add_argument(
        "--family-only",
        action="store_true",
        help="only resolve the launch arguments and print the derived model family (phase 0 facts)",
    )
    parser.add_argument(
        "--emulate-gpu",
        choices=sorted(EMULATED_GPUS),
        help="CPU tests only: resolve as on this GPU (SGLang's override_platform); hosts use their real GPU",
    )
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return EXIT_USAGE if exc.code else EXIT_OK
    if args.service_python:
        extra = [
            a
            for pair in (("--root", args.root), ("--launch-args-json", args.launch_args_json))
            if pair[1]
            for a in pair
        ]
        extra += ["--model-family", args.model_family] + (["--family-only"] if args.family_only else [])
        if args.emulate_gpu:
            extra += ["--emulate-gpu", args.emulate_gpu]
        doc, code = probe_in(args.service_python, args.timeout, extra)
        doc["service_python"] = args.service_python
    else:
        try:
            launch, source = find_launch_args(args.launch_args_json, args.root)
        except ValueError as exc:
            launch, source = None, f"unusable launch arguments: {exc}"
        if args.family_only:
            doc = family_only(launch, source, args.emulate_gpu)
        else:
            doc = run_probe(launch, source, args.emulate_gpu, args.model_family)
        code = exit_code(doc)
    if args.json:
        print(json.dumps(doc, sort_keys=True))
    else:
        print(f"sglang {doc.get('sglang_version')}: {'compatible' if doc.get('compatible') else 'NOT compatible'}")
        for m in doc.get("mismatches", []):
            print(f"  mismatch: {m}")
        print(f"plugin engages: {doc.get('plugin_engages')}")
        for r in doc.get("serving_reasons", []):
            print(f"  not engaged: {r}")
        if doc.get("engage_flags"):
            print(f"  flags that would make it engage: {' '.join(doc['engage_flags'])}")
        if doc.get("blocked"):
            print(f"  blocked: {doc['blocked']}")
    return code


if __name__ == "__main__":
    sys.exit(main())
