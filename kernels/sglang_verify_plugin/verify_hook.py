"""The callable SGLang calls for target-verify attention: bundled kernel or fall back.

SGLang 0.5.23's ``TritonAttnBackend.forward_extend`` calls ``self.verify_shared_kv_fwd``
with ``extend_attention_fwd``'s positional arguments plus ``logit_cap``,
``sliding_window_size``, ``sinks``, ``window_kv_offsets``, ``xai_temperature_len`` and
``max_bs``, only in target-verify mode; the KV of the draft tokens is already saved. The
callable writes ``o_extend`` and returns True, or returns False so SGLang runs its own
``extend_attention_fwd``. :class:`BundledVerify` is that callable.

Every check here looks at Python values, shapes and dtypes only (no ``.item()``, no host
sync), so the decision is fixed for a captured CUDA graph. Imports torch nowhere; the
kernel (``mla_verify``) is imported on first use.

Before any call, :meth:`BundledVerify.preflight` (run when the backend is built) loads the
PREBUILT library that phase 0 built for this GPU's arch (``mla_verify._build.load_prebuilt``:
hash-checked, no compiler, no lock) and checks the KV cache dtype; a failure declines every
call with that reason (``static_decline``), recorded in ``active.json``. Every call is counted:
per captured batch size (at CUDA-graph capture: what the graph will replay) and for eager
calls, routed or declined with the reason (:meth:`BundledVerify.stats`).
"""

from __future__ import annotations

import importlib
import logging
from collections import Counter
from collections.abc import Callable
from typing import Any

from sglang_verify_plugin.route_stats import RouteCounters

log = logging.getLogger("sglang_verify_plugin")

QK_DIM = 576  # kv_lora_rank 512 + rope 64: DeepSeek-V3 / GLM MLA, absorbed
V_DIM = 512


KV_DTYPE_NAMES = {"float8_e4m3fn": "fp8_e4m3", "float8_e5m2": "fp8_e5m2", "float8_e4m3fnuz": "fp8_e4m3fnuz"}
# The KV caches mla_verify reads: bf16, and SGLang's fp8_e4m3 MLA pool (uint8 storage viewed as float8_e4m3fn, one
# per-tensor k_scale / v_scale; the fresh draft rows stay bf16). fp8_e5m2 is declined.
SUPPORTED_KV_DTYPES = ("bfloat16", "float8_e4m3fn")


def load_kernel_module() -> Any:
    """``mla_verify`` (the bundled kernel), imported lazily."""
    return importlib.import_module("mla_verify")


def kv_dtype_name(dtype: Any) -> str:
    """``fp8_e4m3`` for torch.float8_e4m3fn (SGLang's --kv-cache-dtype spelling), else the torch name."""
    name = str(dtype).replace("torch.", "")
    return KV_DTYPE_NAMES.get(name, name)


def kv_dtype_decline(dtype: Any) -> str | None:
    """The decline reason for a KV cache of ``dtype`` (None: the kernel reads it)."""
    if dtype is None:
        return None
    name = str(dtype).replace("torch.", "")
    return None if name in SUPPORTED_KV_DTYPES else f"kv dtype {kv_dtype_name(dtype)} unsupported"


def device_arch(device: Any) -> str | None:
    """The kernel arch of a CUDA device (sm_90a / sm_120a), None for a non-CUDA device."""
    import torch

    device = torch.device(device)
    if device.type != "cuda":
        return None
    build = importlib.import_module("mla_verify._build")
    major, minor = torch.cuda.get_device_capability(device)
    return build.arch_for_capability(major, minor)


def load_prebuilt_library(device: Any) -> dict:
    """Load the prebuilt library for ``device``'s arch; its record, or ``{"checked": False, ...}``
    on a non-CUDA device. Raises ImportError (PrebuiltUnavailable) with the reason."""
    build = importlib.import_module("mla_verify._build")
    try:
        arch = device_arch(device)
    except ValueError as exc:  # a GPU the kernel is not built for
        raise build.PrebuiltUnavailable(str(exc)) from None
    if arch is None:
        return {"checked": False, "why": f"device {device} is not CUDA: no library to load"}
    build.load_prebuilt(arch)
    rec = build.check_prebuilt(arch)
    return {"checked": True, **{k: rec.get(k) for k in ("arch", "path", "sha256", "source_hash", "torch")}}


def graph_workspace(*, max_bs: int, tokens_per_req: int, num_heads: int, kv_indices_numel: int, device: Any) -> Any:
    """fp32 scratch big enough for every batch size a CUDA graph is captured for, or None."""
    import torch

    device = torch.device(device)
    if device.type != "cuda":
        return None
    api = importlib.import_module("mla_verify.api")
    tiles = importlib.import_module("mla_verify.tiles")
    arch = api.device_arch(device)
    cfg = tiles.DEFAULT_CONFIG[arch]
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    # Mirrors mla_verify_fwd's own choice; the split count only grows with kv_indices_numel, so
    # sizing with the graph's (largest) kv_indices buffer covers every captured call. Should the
    # kernel's rule change, a too-small workspace makes it raise ValueError and the hook falls
    # back to SGLang's kernel (logged), never a wrong result.
    per_sm = tiles.ctas_per_sm(cfg, arch) if hasattr(tiles, "ctas_per_sm") else None
    need = 0
    for bs in range(1, max_bs + 1):
        splits = api.choose_num_splits(bs, tokens_per_req, num_heads, kv_indices_numel, sms, cfg, per_sm)
        need = max(need, api.workspace_numel(splits, bs * tokens_per_req, num_heads))
    return torch.empty(need, dtype=torch.float32, device=device) if need else None


def _capturing() -> bool:
    import torch

    return bool(torch.cuda.is_available() and torch.cuda.is_current_stream_capturing())


class BundledVerify(RouteCounters):
    """``verify_shared_kv_fwd`` replacement that routes supported MLA verify calls to the kernel.

    ``fallback`` is the verify kernel SGLang itself had enabled for this backend (None on
    CUDA hosts, where 0.5.23 enables none); declined calls go there, else return False.
    ``reasons`` counts why calls were declined (at capture time under CUDA graphs).
    """

    def __init__(
        self,
        kernel_loader: Callable[[], Any] = load_kernel_module,
        fallback: Callable[..., bool] | None = None,
        on_disabled: Callable[[str], None] | None = None,
        library_loader: Callable[[Any], dict] = load_prebuilt_library,
    ) -> None:
        super().__init__()  # the per-captured-batch-size / eager counters and on_stats
        self._kernel_loader = kernel_loader
        self._library_loader = library_loader
        self.on_disabled = on_disabled  # told once when the kernel turns out unusable
        self._kernel: Any = None
        self._kernel_error: str | None = None
        self.fallback = fallback
        self.workspace: Any = None
        self.calls = 0
        self.bundled_calls = 0
        self.reasons: Counter[str] = Counter()
        self.static_decline: str | None = None  # set by preflight: every call declined with this
        self.library: dict | None = None
        self.kv_dtype: str | None = None

    # -- preflight and counters -----------------------------------------------------
    def preflight(self, device: Any, kv_dtype: Any = None) -> str | None:
        """Decide once, when the backend is built, whether this process can run the kernel.

        Checks the KV cache dtype, imports ``mla_verify`` and loads the prebuilt library for the
        device's arch. Returns (and keeps in ``static_decline``) the reason every call will be
        declined, or None.
        """
        self.kv_dtype = None if kv_dtype is None else kv_dtype_name(kv_dtype)
        reason = kv_dtype_decline(kv_dtype)
        if reason is None and self.kernel() is None:
            reason = f"kernel unavailable: {self._kernel_error}"
        if reason is None:
            try:
                self.library = self._library_loader(device)
            except ImportError as exc:  # PrebuiltUnavailable: missing, hash mismatch, wrong torch
                self.library = {"checked": True, "error": str(exc)}
                reason = str(exc)
        self.static_decline = reason
        if reason:
            log.error("bundled verify kernel declined for this process: %s", reason)
        return reason

    def stats(self) -> dict[str, Any]:
        """What this backend captured and ran, for its process record (active.d/<rank>.json)."""
        return {
            "static_decline": self.static_decline,
            "kernel_error": self._kernel_error,
            "kv_dtype": self.kv_dtype,
            "library": self.library,
            **self.counters(),
        }

    # -- kernel -------------------------------------------------------------------
    def kernel(self) -> Any:
        """The kernel module, or None (the import error is kept in ``kernel_error``)."""
        if self._kernel is None and self._kernel_error is None:
            try:
                mod = self._kernel_loader()
                for name in ("mla_verify_fwd", "supports"):
                    if not callable(getattr(mod, name, None)):
                        raise AttributeError(f"mla_verify has no callable {name}")
                self._kernel = mod
            except Exception as exc:  # any import failure means: stock path, loudly
                self._disable(f"{type(exc).__name__}: {exc}")
        return self._kernel

    def _disable(self, error: str) -> None:
        """From now on every call goes to SGLang's kernel; say so in the log and to the owner."""
        self._kernel, self._kernel_error = None, error
        log.error("bundled verify kernel unavailable, using SGLang's Triton kernel: %s", error)
        if self.on_disabled is not None:
            try:
                self.on_disabled(error)
            except Exception:  # reporting must never break the service
                log.exception("on_disabled callback failed")

    @property
    def kernel_error(self) -> str | None:
        return self._kernel_error

    def allocate_workspace(
        self, *, max_bs: int, tokens_per_req: int, num_heads: int, kv_indices_numel: int, device: Any
    ) -> None:
        """Allocate the kernel's split-K scratch once, before CUDA-graph capture (fixed address).

        Uses the kernel's ``make_workspace(**sizes)`` when it has one; otherwise sizes it with
        ``mla_verify.api`` (``choose_num_splits``/``workspace_numel``) for the largest
        need over every captured batch size. Not a CUDA device: nothing to allocate.
        """
        sizes = dict(
            max_bs=max_bs,
            tokens_per_req=tokens_per_req,
            num_heads=num_heads,
            kv_indices_numel=kv_indices_numel,
            device=device,
        )
        mod = self.kernel()
        if mod is None:
            return
        make = getattr(mod, "make_workspace", None)
        self.workspace = make(**sizes) if callable(make) else graph_workspace(**sizes)

    # -- the hook -----------------------------------------------------------------
    def decline_reason(
        self,
        q_extend: Any,
        k_extend: Any,
        v_extend: Any,
        o_extend: Any,
        k_buffer: Any,
        is_causal: bool,
        logit_cap: float,
        sliding_window_size: int | None,
        sinks: Any,
        window_kv_offsets: Any,
        xai_temperature_len: int | None,
        unknown: dict,
    ) -> str | None:
        """Why this call is not for the bundled kernel (None: it is)."""
        if unknown:
            return f"unknown keyword(s) {sorted(unknown)}"
        if not is_causal:
            return "non-causal"
        if sliding_window_size not in (None, -1):
            return "sliding window"
        if sinks is not None:
            return "attention sinks"
        if window_kv_offsets is not None:
            return "window kv offsets"
        if xai_temperature_len not in (None, -1):
            return "xai temperature"
        if logit_cap not in (None, 0, 0.0):
            return "logit cap"
        kv = kv_dtype_decline(getattr(k_buffer, "dtype", None))
        if kv:
            return kv
        shapes = (
            getattr(q_extend, "shape", ()),
            getattr(o_extend, "shape", ()),
            getattr(k_extend, "shape", ()),
            getattr(k_buffer, "shape", ()),
        )
        q, o, k, kb = shapes
        if len(q) != 3 or q[-1] != QK_DIM or len(o) != 3 or o[-1] != V_DIM or tuple(o[:2]) != tuple(q[:2]):
            return f"not absorbed MLA 576/512 (q {tuple(q)}, o {tuple(o)})"
        if len(k) != 3 or k[1] != 1 or len(kb) != 3 or kb[1] != 1 or kb[-1] != QK_DIM:
            return f"not a single latent KV head (k {tuple(k)}, k_buffer {tuple(kb)})"
        return None

    def __call__(
        self,
        q_extend: Any,
        k_extend: Any,
        v_extend: Any,
        o_extend: Any,
        k_buffer: Any,
        v_buffer: Any,
        qo_indptr: Any,
        kv_indptr: Any,
        kv_indices: Any,
        custom_mask: Any,
        is_causal: bool,
        mask_indptr: Any,
        max_len_extend: int,
        k_scale: float = 1.0,
        v_scale: float = 1.0,
        sm_scale: float | None = None,
        *,
        logit_cap: float = 0.0,
        sliding_window_size: int | None = -1,
        sinks: Any = None,
        window_kv_offsets: Any = None,
        xai_temperature_len: int | None = -1,
        max_bs: int | None = None,
        **unknown: Any,
    ) -> bool:
        self.calls += 1
        capturing = _capturing()
        qo_shape = getattr(qo_indptr, "shape", None)
        bs = int(qo_shape[0]) - 1 if qo_shape else None
        positional = (
            q_extend,
            k_extend,
            v_extend,
            o_extend,
            k_buffer,
            v_buffer,
            qo_indptr,
            kv_indptr,
            kv_indices,
            custom_mask,
            is_causal,
            mask_indptr,
            max_len_extend,
            k_scale,
            v_scale,
            sm_scale,
        )
        reason = self.decline_reason(
            q_extend,
            k_extend,
            v_extend,
            o_extend,
            k_buffer,
            is_causal,
            logit_cap,
            sliding_window_size,
            sinks,
            window_kv_offsets,
            xai_temperature_len,
            unknown,
        )
        mod = None
        if reason is None and self.static_decline is not None:
            reason = self.static_decline
        if reason is None:
            mod = self.kernel()
            if mod is None:
                reason = "kernel unavailable"
        scalars = {"k_scale": k_scale, "v_scale": v_scale, "sm_scale": sm_scale, "logit_cap": logit_cap}
        if reason is None and not mod.supports(*positional[:13], **scalars):
            reason = "mla_verify.supports() declined the shape"
        if reason is None:
            # Under capture the graph must own a fixed-address scratch; eager calls may use
            # the kernel's own cache (an eager batch can be larger than any captured one).
            extra = {"workspace": self.workspace} if self.workspace is not None and capturing else {}
            try:
                mod.mla_verify_fwd(*positional[:13], **scalars, **extra)
            except ValueError as exc:  # the kernel's argument check: never a wrong result
                reason = f"kernel refused: {exc}"
            except (ImportError, OSError, RuntimeError) as exc:  # extension build/load or launch failed
                self._disable(f"{type(exc).__name__}: {exc}")
                reason = "kernel unavailable"
            else:
                self.bundled_calls += 1
                self.count(bs, capturing, None)
                return True
        self.count(bs, capturing, reason)
        if reason not in self.reasons:  # once per reason: visible in the service log, never per call
            log.warning("target verify on SGLang's kernel instead of the bundled one: %s", reason)
        self.reasons[reason] += 1
        if self.fallback is not None:
            return bool(
                self.fallback(
                    *positional,
                    logit_cap=logit_cap,
                    sliding_window_size=sliding_window_size,
                    sinks=sinks,
                    window_kv_offsets=window_kv_offsets,
                    xai_temperature_len=xai_temperature_len,
                    max_bs=max_bs,
                    **unknown,
                )
            )
        return False
