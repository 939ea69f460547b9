"""SGLang `dsa` backend with target verify routed to the bundled sparse MLA kernel (dsa_verify).

`sglang_verify_plugin.register()` replaces `ATTENTION_BACKENDS["dsa"]` (the name is kept: SGLang
compares it in several places) with :func:`make_dsa_factory`'s factory. Each time a process
builds its attention backend it reads the config (`verify_backend.json`): with
`verify_kernel: bundled` and `model_family: dsa` it returns `BundledDsaVerifyBackend`, a subclass
of SGLang 0.5.23's `DeepseekSparseAttnBackend` (its isinstance checks accept a subclass), for the
target runner; otherwise SGLang's own backend (stock factory). SGLang also builds the MTP draft
runner's backend through this registry (then replaces it with a `DeepseekSparseAttnBackend` of
its own): the factory returns SGLang's class for any runner that is not the target's.

Routing: `forward_extend` marks the call when `forward_batch.forward_mode.is_target_verify()`
(TARGET_VERIFY goes through forward_extend, and SGLang then runs its decode impl). The decode
impls that receive the verify tensors after the KV save and the index transform are overridden:
`_forward_flashinfer_sparse_mla` (sm_120 default, fp8), `_forward_fa3` (sm_90 default, bf16) and
`_forward_flashmla_kv` (sm_90, fp8). On a marked call each one hands q_all [T, H, 576],
kv_cache, page_table_1 [T, index_topk] and dsa_cache_seqlens_int32 to `dsa_verify.dsa_verify_fwd`;
anything the bundled kernel does not support (why_unsupported: shape, dtype, stride, device;
skip-softmax thresholds; v_head_dim != 512; index kpool > 1; a page-table width other than the
model's index_topk; the prebuilt library missing; a kernel error) falls back to SGLang's own
impl. A verify that SGLang serves with an impl not overridden here (trtllm, flashmla_sparse,
tilelang, ...) is counted as declined (`impl <name>`). Draft extend and prefill are never routed.
The trace of these paths through SGLang 0.5.23 (file:line) is in docs/kernels/sglang-plugin.md.

Every routed or declined verify call is counted per process and role (all the bundled backends
of one rank share one `DsaRouteStats`: two-batch overlap builds three) with the same record the
dense route writes (:meth:`stats`): per CUDA-graph-captured batch size which kernel the graph
replays (the capture's eager warmup runs count with it), eager calls routed/declined with
reasons, the static decline (no prebuilt library: every call declined) and the library record.
The process record (`active.d/<rank>.json`, merged into `active.json`) carries `route: "dsa"`.

The workspace is owned by the backend instance: one per (T, H, kv format) while capturing
(allocated by the warmup runs before the capture, reused by every replay of that graph), one
grow-only buffer for eager calls.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from sglang_verify_plugin.config import (
    VerifyConfig,
    load_config,
    mark_dirty,
    record_active,
    set_rank,
    set_stats_provider,
)
from sglang_verify_plugin.route_stats import RouteCounters

log = logging.getLogger("sglang_verify_plugin")

BACKEND_NAME = "dsa"
ROUTE_DSA = "dsa"  # active.json route of a rank whose target verify runs the bundled DSA kernel
ROUTE_DECLINED = "declined"
MODEL_FAMILY = "dsa"  # verify_backend.json `model_family` that enables this route
_STOCK_ATTR = "_orchestrator_stock_factory"


def _short(reason: str | None) -> str:
    """The reason's first clause (``q_all: must be a CUDA tensor`` -> ``q_all``), for counters."""
    return reason.split(":", 1)[0].strip()[:60] if reason else "unknown"


_CAPTURE_MODE: list = []  # [SGLang's get_is_capture_mode or None], resolved once


def _capturing() -> bool:
    """True inside CUDA-graph capture: the stream is capturing, or SGLang's graph runner is in
    capture mode (its two eager warmup runs per batch size, full_cuda_graph_backend.py:162,
    run under model_capture_mode(), decode_cuda_graph_runner.py:599: they make the same
    decision as the captured run and are counted with it, not as eager serving calls)."""
    import torch

    if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
        return True
    if not _CAPTURE_MODE:
        try:
            from sglang.srt.model_executor.runner_utils.capture_mode import get_is_capture_mode
        except Exception:  # noqa: BLE001 - another SGLang layout: stream capture only
            get_is_capture_mode = None
        _CAPTURE_MODE.append(get_is_capture_mode)
    fn = _CAPTURE_MODE[0]
    return bool(fn is not None and fn())


def load_dsa_library(device: Any) -> dict:
    """Load the prebuilt DSA library (phase 0) for ``device``'s arch: its record, or
    ``{"checked": False, ...}`` on a non-CUDA device. Raises ImportError with the reason."""
    import torch

    device = torch.device(device)
    if device.type != "cuda":
        return {"checked": False, "why": f"device {device} is not CUDA: no library to load"}
    from dsa_verify import _build
    from mla_verify._build import arch_for_capability

    try:
        arch = arch_for_capability(*torch.cuda.get_device_capability(device))
    except ValueError as exc:
        raise ImportError(str(exc)) from None
    _build.load_prebuilt(arch)
    rec = _build.check_prebuilt(arch)
    return {"checked": True, **{k: rec.get(k) for k in ("arch", "path", "sha256", "source_hash", "torch")}}


class DsaRouteStats(RouteCounters):
    """Per-backend counters of target-verify calls (the dense route's BundledVerify.stats layout)."""

    def __init__(self) -> None:
        super().__init__()
        self.static_decline: str | None = None
        self.kernel_error: str | None = None
        self.library: dict | None = None
        self.kv_dtype: str | None = None

    def count(self, bs: int | None, capturing: bool, reason: str | None) -> bool:
        new = super().count(bs, capturing, reason)
        if new and reason is not None and not capturing:  # once per reason in the service log, never per call
            log.warning("DSA target verify on SGLang's kernel instead of the bundled one: %s", reason)
        return new

    def stats(self) -> dict[str, Any]:
        return {
            "route": ROUTE_DSA,
            "static_decline": self.static_decline,
            "kernel_error": self.kernel_error,
            "kv_dtype": self.kv_dtype,
            "library": self.library,
            **self.counters(),
        }


_PROCESS_ROUTES: dict[tuple, DsaRouteStats] = {}  # (role, rank) -> the counters all its backends share


def process_route(role: str, rank: dict | None = None) -> DsaRouteStats:
    """The counters shared by every bundled backend this process builds for ``role``: with
    two-batch overlap SGLang builds a primary and two children through the factory
    (tbo_backend.py:44-48), and each child runs a micro-batch of the verify."""
    r = rank or {}
    key = (role, r.get("tp_rank"), r.get("pp_rank"), r.get("dp_rank"))
    route = _PROCESS_ROUTES.get(key)
    if route is None:
        route = _PROCESS_ROUTES[key] = DsaRouteStats()
    return route


def reset_process_routes() -> None:
    """Forget the shared counters (tests: a new process)."""
    _PROCESS_ROUTES.clear()


_CLASS = None


def backend_class():
    """The subclass of SGLang's DeepseekSparseAttnBackend (built once; imports sglang)."""
    global _CLASS
    if _CLASS is not None:
        return _CLASS
    from sglang.srt.layers.attention.dsa_backend import DeepseekSparseAttnBackend

    class BundledDsaVerifyBackend(DeepseekSparseAttnBackend):
        """DeepseekSparseAttnBackend whose target-verify attention runs the bundled kernel."""

        _dsa_verify_marked = False
        _dsa_verify_bs: int | None = None
        _dsa_verify_reached = False  # an overridden impl saw the marked call (else: counted as declined)

        @property
        def dsa_route(self) -> DsaRouteStats:
            route = self.__dict__.get("_dsa_route")
            if route is None:
                route = self.__dict__["_dsa_route"] = DsaRouteStats()
            return route

        def dsa_stats(self) -> dict[str, Any]:
            return self.dsa_route.stats()

        def dsa_preflight(self, library_loader: Callable[[Any], dict] | None = None) -> str | None:
            """Once, when the backend is built: load the prebuilt DSA library for this GPU (a
            service never compiles). The reason every call will be declined, or None."""
            route = self.dsa_route
            pool = getattr(self, "token_to_kv_pool", None)
            dtype = getattr(pool, "dtype", None)
            route.kv_dtype = None if dtype is None else str(dtype).replace("torch.", "")
            try:
                route.library = (library_loader or load_dsa_library)(getattr(self, "device", "cpu"))
                reason = None
            except ImportError as exc:  # PrebuiltUnavailable: missing, hash mismatch, wrong torch
                route.library = {"checked": True, "error": str(exc)}
                reason = str(exc)
            except Exception as exc:  # noqa: BLE001 - any doubt: SGLang's kernel, with the reason
                route.library = {"checked": True, "error": f"{type(exc).__name__}: {exc}"}
                reason = f"library check failed: {type(exc).__name__}: {exc}"
            route.static_decline = reason
            if reason:
                log.error("bundled DSA verify kernel declined for this process: %s", reason)
            return reason

        def forward_extend(self, q, k, v, layer, forward_batch, *args, **kwargs):
            mode = getattr(forward_batch, "forward_mode", None)
            marked = bool(mode is not None and mode.is_target_verify())
            prev = self._dsa_verify_marked, self._dsa_verify_bs, self._dsa_verify_reached
            self._dsa_verify_marked = marked
            self._dsa_verify_bs = getattr(forward_batch, "batch_size", None) if marked else None
            self._dsa_verify_reached = False
            try:
                out = super().forward_extend(q, k, v, layer, forward_batch, *args, **kwargs)
                if marked and not self._dsa_verify_reached:
                    # SGLang served this verify with an impl that is not overridden here
                    # (trtllm, flashmla_sparse, tilelang, triton, aiter, ...): count it, never
                    # let a rank look idle while it runs SGLang's kernel
                    self._dsa_decline(f"impl {getattr(self, 'dsa_decode_impl', None) or 'unknown'}")
                return out
            finally:
                self._dsa_verify_marked, self._dsa_verify_bs, self._dsa_verify_reached = prev

        def _dsa_decline(self, reason: str) -> None:
            self._dsa_verify_reached = True
            self.dsa_route.count(self._dsa_verify_bs, _capturing(), reason)

        def _dsa_workspace(self, q_all, kv, page_table_1, capturing: bool):
            """The bundled kernel's split workspace, owned by this backend: one per call shape
            while capturing (allocated by the eager warmup runs before the capture, then
            replayed by that shape's graph; never freed), one grow-only buffer for eager calls
            (no graph reads it, so replacing it is safe)."""
            import torch

            from dsa_verify.api import workspace_numel_for

            need = max(1, workspace_numel_for(q_all, kv, page_table_1))
            wss = self.__dict__.setdefault("_dsa_verify_ws", {})
            dev = q_all.device.index
            key = (q_all.shape[0], q_all.shape[1], kv.shape[-1], dev) if capturing else ("eager", dev)
            ws = wss.get(key)
            if ws is None or ws.numel() < need:
                ws = wss[key] = torch.empty(need, dtype=torch.float32, device=q_all.device)
            return ws

        # -- the bundled call, or None (then the caller falls back) --
        def _dsa_bundled(self, q_all, kv_cache, page_table_1, seq_lens, sm_scale, v_head_dim=512):
            if not self._dsa_verify_marked:
                return None
            self._dsa_verify_reached = True
            route = self.dsa_route
            reason = route.static_decline
            if reason is None and route.kernel_error is not None:
                reason = "kernel disabled"
            if reason is None and v_head_dim != 512:
                reason = "v_head_dim != 512"
            if reason is None and int(getattr(self, "dsa_index_kpool", 1) or 1) > 1:
                reason = "index_kpool > 1"
            topk = getattr(self, "dsa_index_topk", None)  # the model config's index_topk
            if reason is None and topk is not None and page_table_1.shape[-1] != int(topk):
                reason = "topk_width != index_topk"
            if reason is None:
                try:
                    from dsa_verify.api import dsa_verify_fwd, why_unsupported

                    T = q_all.shape[0]
                    if seq_lens.shape[0] > T:  # trailing metadata padding (graph batches)
                        seq_lens = seq_lens[:T]
                    row = kv_cache.shape[-1]
                    kv = kv_cache.reshape(-1, 1, row) if kv_cache.dim() != 3 or kv_cache.shape[1] != 1 else kv_cache
                    why = why_unsupported(q_all, kv, page_table_1, seq_lens, float(sm_scale))
                    if why is not None:
                        reason = _short(why)
                    else:
                        capturing = _capturing()
                        ws = self._dsa_workspace(q_all, kv, page_table_1, capturing)
                        out = dsa_verify_fwd(q_all, kv, page_table_1, seq_lens, float(sm_scale), workspace=ws)
                        route.count(self._dsa_verify_bs, capturing, None)
                        return out
                except (
                    ImportError,
                    OSError,
                    RuntimeError,
                ) as exc:  # a kernel or load error never takes the service down
                    route.kernel_error = f"{type(exc).__name__}: {exc}"[:300]
                    log.error("bundled DSA verify kernel disabled in this process: %s", route.kernel_error)
                    reason = "error"
                except Exception as exc:  # noqa: BLE001 - an argument check: SGLang's kernel for this call
                    reason = f"error: {type(exc).__name__}"
            self._dsa_decline(reason or "unknown")
            return None

        def _forward_flashinfer_sparse_mla(
            self, q_all, kv_cache, page_table_1, seq_lens, sm_scale, skip_softmax_threshold_scale_factor
        ):
            if self._dsa_verify_marked and skip_softmax_threshold_scale_factor is not None:
                self._dsa_decline("skip_softmax_threshold")
            else:
                out = self._dsa_bundled(q_all, kv_cache, page_table_1, seq_lens, sm_scale)
                if out is not None:
                    return out
            return super()._forward_flashinfer_sparse_mla(
                q_all, kv_cache, page_table_1, seq_lens, sm_scale, skip_softmax_threshold_scale_factor
            )

        def _forward_fa3(
            self,
            q_rope,
            kv_cache,
            v_head_dim,
            q_nope,
            page_table,
            cache_seqlens,
            cu_seqlens_q,
            cu_seqlens_k,
            max_seqlen_q,
            sm_scale,
            logit_cap,
            page_size,
        ):
            if self._dsa_verify_marked:
                if logit_cap or page_size != 1 or max_seqlen_q != 1 or q_rope is None:
                    self._dsa_decline("fa3_args")
                else:
                    import torch

                    q_all = torch.cat([q_nope, q_rope], dim=-1)
                    out = self._dsa_bundled(q_all, kv_cache, page_table, cache_seqlens, sm_scale, v_head_dim)
                    if out is not None:
                        return out
            return super()._forward_fa3(
                q_rope,
                kv_cache,
                v_head_dim,
                q_nope,
                page_table,
                cache_seqlens,
                cu_seqlens_q,
                cu_seqlens_k,
                max_seqlen_q,
                sm_scale,
                logit_cap,
                page_size,
            )

        def _forward_flashmla_kv(self, q_all, kv_cache, v_head_dim, sm_scale, layer, metadata, page_table_1):
            if self._dsa_verify_marked and getattr(self, "dsa_kv_cache_store_fp8", True):
                q3 = q_all.reshape(q_all.shape[0], -1, q_all.shape[-1]) if q_all.dim() != 3 else q_all
                out = self._dsa_bundled(
                    q3, kv_cache, page_table_1, metadata.dsa_cache_seqlens_int32, sm_scale, v_head_dim
                )
                if out is not None:
                    return out.view(out.shape[0], 1, out.shape[1], out.shape[2])  # FlashMLA's [T, 1, H, 512]
            elif self._dsa_verify_marked:
                self._dsa_decline("flashmla_kv_bf16_store")
            return super()._forward_flashmla_kv(q_all, kv_cache, v_head_dim, sm_scale, layer, metadata, page_table_1)

    _CLASS = BundledDsaVerifyBackend
    return _CLASS


def _route_refusal(cfg: VerifyConfig) -> str | None:
    """Why this config does not enable the dsa route (None: it does)."""
    if not cfg.bundled:
        return cfg.reason
    if cfg.model_family != MODEL_FAMILY:
        return (
            f"{cfg.reason}, model_family={cfg.model_family or 'dense_mla'}: the bundle was cut over for the "
            "dense (triton) route; this model is served by SGLang's dsa backend"
        )
    return None


def make_dsa_factory(
    stock: Callable[[Any], Any], config_loader: Callable[[], VerifyConfig] = load_config
) -> Callable[[Any], Any]:
    """The factory registered under "dsa": the bundled subclass or SGLang's own, per the config."""

    def create_dsa_backend_with_bundled_verify(runner: Any) -> Any:
        from sglang_verify_plugin.backend import runner_rank, runner_role

        cfg = config_loader()
        role = runner_role(runner)
        rank = runner_rank(runner)
        set_rank(**rank)
        why_not = _route_refusal(cfg)
        if why_not is None and role != "target":
            # SGLang builds the draft runner's backend through this registry too
            # (eagle_worker_v2.py:283 -> model_runner.py:1122 -> attention_backend_setup.py:283)
            # before it swaps in its own DeepseekSparseAttnBackend (draft_utils.py:214-225,
            # eagle_worker_v2.py:414): verify runs in the target model, the draft stays SGLang's
            why_not = f"{cfg.reason}; {role} runner: only the target model's verify is routed"
        if why_not is not None:
            log.info("DSA verify kernel: SGLang's own (%s)", why_not)
            backend = stock(runner)
            record_active(
                VerifyConfig("stock", cfg.bundle_sha, cfg.defrag, why_not, model_family=cfg.model_family),
                role=role,
                route="stock",
            )
            return backend
        log.info("DSA verify kernel: bundled %s (%s)", (cfg.bundle_sha or "?")[:12], cfg.reason)
        backend = backend_class()(runner)
        backend.__dict__["_dsa_route"] = process_route(role, rank)
        record_dsa_active(backend, cfg, role)
        return backend

    setattr(create_dsa_backend_with_bundled_verify, _STOCK_ATTR, stock)
    return create_dsa_backend_with_bundled_verify


def record_dsa_active(backend: Any, cfg: VerifyConfig, role: str = "target") -> None:
    """Preflight ``backend`` and record what it will do in this process's record (active.d)."""
    backend.dsa_preflight()
    route = backend.dsa_route
    route.on_stats = mark_dirty
    if role == "target":
        set_stats_provider(role, backend.dsa_stats)
    if route.static_decline:
        record_active(
            VerifyConfig(
                "stock",
                cfg.bundle_sha,
                cfg.defrag,
                f"bundled DSA kernel declined: {route.static_decline}",
                model_family=cfg.model_family,
            ),
            role=role,
            route=ROUTE_DECLINED,
        )
    else:
        record_active(cfg, role=role, route=ROUTE_DSA, library=route.library)


def register_dsa(config_loader: Callable[[], VerifyConfig] = load_config) -> str | None:
    """Install the factory under the name 'dsa' (idempotent); None on success, else why it was not
    installed (SGLang's own factory then stays in place)."""
    try:
        from sglang.srt.layers.attention import attention_registry

        backends = attention_registry.ATTENTION_BACKENDS
        if not isinstance(backends, dict) or BACKEND_NAME not in backends:
            return f"sglang has no ATTENTION_BACKENDS[{BACKEND_NAME!r}]"
        backend_class()
    except Exception as exc:  # noqa: BLE001 - the dense route must register without the DSA one
        return f"sglang dsa backend not importable: {type(exc).__name__}: {exc}"[:300]
    current = backends[BACKEND_NAME]
    stock = getattr(current, _STOCK_ATTR, current)
    backends[BACKEND_NAME] = make_dsa_factory(stock, config_loader)
    return None


def unregister_dsa() -> bool:
    """Put SGLang's own "dsa" factory back (tests; a live service just restarts)."""
    try:
        from sglang.srt.layers.attention import attention_registry
    except ImportError:
        return False
    current = attention_registry.ATTENTION_BACKENDS.get(BACKEND_NAME)
    stock = getattr(current, _STOCK_ATTR, None)
    if stock is None:
        return False
    attention_registry.ATTENTION_BACKENDS[BACKEND_NAME] = stock
    return True
