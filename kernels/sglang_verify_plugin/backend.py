"""``BundledVerifyTritonBackend``: SGLang's Triton backend with target verify swapped.

Imports SGLang at module level: import this only where SGLang is installed (the
registration does so lazily). Everything except target-verify MLA attention of a supported
shape stays on :class:`TritonAttnBackend`.

Two routes to the kernel:

- ``hook`` (SGLang 0.5.23 and later): set ``use_verify_shared_kv``, clear
  ``use_verify_splitkv`` and bind ``verify_shared_kv_fwd`` to :class:`BundledVerify`;
  SGLang's own ``forward_extend`` saves the draft KV and calls it.
- ``forward_extend`` (releases without the hook): override ``forward_extend`` for target
  verify: save the KV as the parent does, run the kernel on ``self.forward_metadata``,
  and hand anything else (or a declined shape) to the parent.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from sglang.srt.layers.attention.triton_backend import TritonAttnBackend

from sglang_verify_plugin.config import VerifyConfig, load_config, mark_dirty, record_active, set_stats_provider
from sglang_verify_plugin.verify_hook import BundledVerify

log = logging.getLogger("sglang_verify_plugin")

ROUTE_HOOK = "hook"
ROUTE_FORWARD_EXTEND = "forward_extend"
ROUTE_NONE = "none"  # not an MLA model: nothing to swap
ROUTE_DECLINED = "declined"  # installed, but preflight declined every call (fp8 KV, no prebuilt library)
ROUTE_DISABLED = "disabled"  # the kernel failed at run time; every later call goes to SGLang


def _record_disabled(error: str) -> None:
    """The kernel became unusable in this process: active.json must stop claiming it runs."""
    cfg = load_config()
    record_active(
        VerifyConfig("stock", cfg.bundle_sha, cfg.defrag, f"bundled kernel disabled: {error}"), route=ROUTE_DISABLED
    )


def runner_role(runner: Any) -> str:
    """ "draft" for a speculative draft runner's backend, else "target" (where verify runs)."""
    return "draft" if getattr(runner, "is_draft_worker", False) else "target"


def runner_rank(runner: Any) -> dict:
    """tp_rank / tp_size / pp_rank / dp_rank of this process, from SGLang's parallel context."""
    out: dict = {"tp_rank": None, "tp_size": None, "pp_rank": 0, "dp_rank": None}
    try:
        from sglang.srt.runtime_context import get_parallel

        par = get_parallel()
    except Exception:  # older layouts: fall back to the runner's attributes
        par = None
    for name in out:
        for src in (runner, par):
            try:
                val = getattr(src, name)
            except Exception:  # an unset parallel field raises: that rank field stays unknown
                continue
            if isinstance(val, int):
                out[name] = val
                break
    return out


def has_verify_hook(backend: Any) -> bool:
    """True when the parent's ``__init__`` set up the 0.5.23 verify hook attributes."""
    return all(hasattr(backend, a) for a in ("use_verify_shared_kv", "use_verify_splitkv", "verify_shared_kv_fwd"))


class BundledVerifyTritonBackend(TritonAttnBackend):
    """TritonAttnBackend whose target-verify MLA attention runs the bundled kernel."""

    def __init__(self, model_runner: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(model_runner, *args, **kwargs)
        self.install_bundled_verify()

    def install_bundled_verify(self, verify: BundledVerify | None = None, route: str | None = None) -> None:
        """Wire the bundled verify into this (already constructed) backend."""
        parent_verify = None
        if getattr(self, "use_verify_shared_kv", False):
            parent_verify = self.verify_shared_kv_fwd
        elif getattr(self, "use_verify_splitkv", False):
            parent_verify = self.verify_splitkv_fwd
        self.bundled_verify = verify or BundledVerify()
        self.bundled_verify.fallback = parent_verify
        self.bundled_verify.on_disabled = _record_disabled
        self.bundled_verify.on_stats = mark_dirty
        if route is None:
            if not getattr(self, "use_mla", False):
                route = ROUTE_NONE
            elif has_verify_hook(self):
                route = ROUTE_HOOK
            else:
                route = ROUTE_FORWARD_EXTEND
        self.bundled_verify_route = route
        if route == ROUTE_HOOK:
            self.verify_shared_kv_fwd = torch.compiler.disable(self.bundled_verify)
            self.use_verify_shared_kv = True
            self.use_verify_splitkv = False
        if route != ROUTE_NONE:
            pool = getattr(self, "token_to_kv_pool", None)
            self.bundled_verify.preflight(getattr(self, "device", "cpu"), getattr(pool, "dtype", None))
        log.info(
            "bundled MLA verify kernel installed (route=%s%s)",
            route,
            f", every call declined: {self.bundled_verify.static_decline}"
            if self.bundled_verify.static_decline
            else "",
        )

    def record_active(self, cfg: VerifyConfig, role: str = "target") -> None:
        """Record what this backend will do in this process's record (active.d) and active.json."""
        bv = self.bundled_verify
        if role == "target":
            set_stats_provider(role, bv.stats)
        if self.bundled_verify_route == ROUTE_NONE:
            record_active(
                VerifyConfig("stock", cfg.bundle_sha, cfg.defrag, "not an MLA model: SGLang's verify kept"),
                role=role,
                route=ROUTE_NONE,
            )
        elif bv.static_decline:
            record_active(
                VerifyConfig("stock", cfg.bundle_sha, cfg.defrag, f"bundled kernel declined: {bv.static_decline}"),
                role=role,
                route=ROUTE_DECLINED,
            )
        elif bv.kernel_error:
            record_active(
                VerifyConfig("stock", cfg.bundle_sha, cfg.defrag, f"bundled kernel disabled: {bv.kernel_error}"),
                role=role,
                route=ROUTE_DISABLED,
            )
        else:
            record_active(cfg, role=role, route=self.bundled_verify_route, library=bv.library)

    def init_cuda_graph_state(self, max_bs: int, max_num_tokens: int, *args: Any, **kwargs: Any) -> None:
        super().init_cuda_graph_state(max_bs, max_num_tokens, *args, **kwargs)
        if self.bundled_verify_route != ROUTE_NONE:
            kv_indices = getattr(self, "cuda_graph_kv_indices", None)
            self.bundled_verify.allocate_workspace(
                max_bs=max_bs,
                tokens_per_req=max(1, max_num_tokens // max(1, max_bs)),
                num_heads=self.num_head,
                device=self.device,
                kv_indices_numel=kv_indices.numel()
                if kv_indices is not None
                else max_num_tokens * self.max_context_len,
            )

    # -- route B: releases without the verify hook ----------------------------------
    def _route_b_applies(
        self, k: Any, v: Any, layer: Any, forward_batch: Any, save_kv_cache: bool, extra: dict
    ) -> bool:
        return (
            self.bundled_verify_route == ROUTE_FORWARD_EXTEND
            and forward_batch.forward_mode.is_target_verify()
            and k is not None
            and v is not None
            and save_kv_cache
            and not any(extra.get(n) is not None for n in ("sinks", "score_mod", "aux_tensors"))
            and getattr(self, "dcp_size", 1) == 1
            and not getattr(self, "enable_deterministic", False)
            and getattr(layer, "k_scale", None) is None
            and getattr(layer, "sliding_window_size", -1) in (None, -1)
            and getattr(forward_batch, "_attn_output", None) is None
        )

    def forward_extend(
        self,
        q: Any,
        k: Any,
        v: Any,
        layer: Any,
        forward_batch: Any,
        save_kv_cache: bool = True,
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        names = ("sinks", "score_mod", "aux_tensors")
        extra = {**dict(zip(names, args)), **kwargs}
        if not self._route_b_applies(k, v, layer, forward_batch, save_kv_cache, extra):
            return super().forward_extend(q, k, v, layer, forward_batch, save_kv_cache, *args, **kwargs)
        md = self.forward_metadata
        self.token_to_kv_pool.set_kv_buffer(layer, forward_batch.out_cache_loc, k, v)
        o = q.new_empty((q.shape[0], layer.tp_q_head_num * layer.v_head_dim))
        ran = self.bundled_verify(
            q.view(-1, layer.tp_q_head_num, layer.qk_head_dim),
            k.contiguous(),
            v.contiguous(),
            o.view(-1, layer.tp_q_head_num, layer.v_head_dim),
            self.token_to_kv_pool.get_key_buffer(layer.layer_id),
            self.token_to_kv_pool.get_value_buffer(layer.layer_id),
            md.qo_indptr,
            md.kv_indptr,
            md.kv_indices,
            md.custom_mask,
            True,
            md.mask_indptr,
            md.max_extend_len,
            1.0,
            1.0,
            layer.scaling,
            logit_cap=getattr(layer, "logit_cap", 0.0) or 0.0,
        )
        if ran:
            return o
        # KV already saved above; the parent must not save it twice.
        return super().forward_extend(q, k, v, layer, forward_batch, False, *args, **kwargs)
