"""SGLang `dsa` backend with target verify routed to the bundled sparse MLA kernel (dsa_verify).

`register_dsa()` replaces `ATTENTION_BACKENDS["dsa"]` (the name is kept: SGLang compares it in
several places) with a factory returning `BundledDsaVerifyBackend`, a subclass of SGLang 0.5.23's
`DeepseekSparseAttnBackend` (its isinstance checks accept a subclass). Only the target model's
backend comes from this factory; the MTP draft worker builds `DeepseekSparseAttnBackend` itself.

Routing: `forward_extend` marks the call when `forward_batch.forward_mode.is_target_verify()`
(TARGET_VERIFY goes through forward_extend, and SGLang then runs its decode impl). The decode
impls that receive the verify tensors after the KV save and the index transform are overridden:
`_forward_flashinfer_sparse_mla` (sm_120 default, fp8), `_forward_fa3` (sm_90 default, bf16) and
`_forward_flashmla_kv` (sm_90, fp8). On a marked call each one hands q_all [T, H, 576],
kv_cache, page_table_1 [T, 2048] and dsa_cache_seqlens_int32 to `dsa_verify.dsa_verify_fwd`;
anything the bundled kernel does not support (why_unsupported: shape, dtype, stride, device;
skip-softmax thresholds; v_head_dim != 512; index kpool > 1; a kernel error) falls back to
SGLang's own impl, and every decision is counted per reason in `route_stats()` (per process =
per TP rank) so active.json can report the route truthfully. Draft extend and prefill are never
routed. The workspace is persistent per (T, H, kv format) and owned by the backend instance
(allocated on first use, before or inside CUDA-graph capture, then reused by every replay).
"""

from __future__ import annotations

import threading
from collections import Counter

ROUTE_BUNDLED = "bundled"
_STATS: Counter = Counter()
_LOCK = threading.Lock()


def _count(key: str) -> None:
    with _LOCK:
        _STATS[key] += 1


def route_stats() -> dict:
    """{'bundled': n, 'fallback:<reason>': n, ...} for this process (one TP rank)."""
    with _LOCK:
        return dict(_STATS)


def reset_route_stats() -> None:
    with _LOCK:
        _STATS.clear()


def _short(reason: str) -> str:
    return reason.split(":", 1)[0].strip()[:60] if reason else "unknown"


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

        def forward_extend(self, q, k, v, layer, forward_batch, *args, **kwargs):
            mode = getattr(forward_batch, "forward_mode", None)
            marked = bool(mode is not None and mode.is_target_verify())
            prev = self._dsa_verify_marked
            self._dsa_verify_marked = marked
            try:
                return super().forward_extend(q, k, v, layer, forward_batch, *args, **kwargs)
            finally:
                self._dsa_verify_marked = prev

        # -- the bundled call, or None (then the caller falls back) --
        def _dsa_bundled(self, q_all, kv_cache, page_table_1, seq_lens, sm_scale, v_head_dim=512):
            if not self._dsa_verify_marked:
                return None
            reason = None
            if v_head_dim != 512:
                reason = f"v_head_dim: {v_head_dim} != 512"
            elif int(getattr(self, "dsa_index_kpool", 1) or 1) > 1:
                reason = "index_kpool: > 1 (pooled page table)"
            if reason is None:
                try:
                    from dsa_verify.api import dsa_verify_fwd, why_unsupported, workspace_numel_for

                    T = q_all.shape[0]
                    if seq_lens.shape[0] > T:  # trailing metadata padding (graph batches)
                        seq_lens = seq_lens[:T]
                    row = kv_cache.shape[-1]
                    kv = kv_cache.reshape(-1, 1, row) if kv_cache.dim() != 3 or kv_cache.shape[1] != 1 else kv_cache
                    reason = why_unsupported(q_all, kv, page_table_1, seq_lens, float(sm_scale))
                    if reason is None:
                        key = (T, q_all.shape[1], row, q_all.device.index)
                        wss = self.__dict__.setdefault("_dsa_verify_ws", {})
                        ws = wss.get(key)
                        if ws is None:
                            import torch

                            need = workspace_numel_for(q_all, kv, page_table_1)
                            ws = torch.empty(max(1, need), dtype=torch.float32, device=q_all.device)
                            wss[key] = ws
                        out = dsa_verify_fwd(q_all, kv, page_table_1, seq_lens, float(sm_scale), workspace=ws)
                        _count(ROUTE_BUNDLED)
                        return out
                except Exception as exc:  # a kernel or build error never takes the service down
                    reason = f"error: {type(exc).__name__}: {exc}"
            _count("fallback:" + _short(reason))
            return None

        def _forward_flashinfer_sparse_mla(
            self, q_all, kv_cache, page_table_1, seq_lens, sm_scale, skip_softmax_threshold_scale_factor
        ):
            if self._dsa_verify_marked and skip_softmax_threshold_scale_factor is not None:
                _count("fallback:skip_softmax_threshold")
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
                    _count("fallback:fa3_args")
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
                _count("fallback:flashmla_kv_bf16_store")
            return super()._forward_flashmla_kv(q_all, kv_cache, v_head_dim, sm_scale, layer, metadata, page_table_1)

    _CLASS = BundledDsaVerifyBackend
    return _CLASS


def create_dsa_backend(runner):
    """Factory registered as ATTENTION_BACKENDS['dsa']."""
    return backend_class()(runner)


def register_dsa() -> str | None:
    """Install the factory under the name 'dsa'; None on success, else why it was not installed
    (SGLang's own factory then stays in place)."""
    try:
        from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS

        backend_class()
    except Exception as exc:
        return f"sglang dsa backend not importable: {type(exc).__name__}: {exc}"[:300]
    ATTENTION_BACKENDS["dsa"] = create_dsa_backend
    return None
