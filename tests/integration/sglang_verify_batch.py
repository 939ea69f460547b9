"""Build a target-verify MLA batch the way SGLang 0.5.23 does, on any device (tests only).

The backend is created through SGLang's registry (``ATTENTION_BACKENDS["triton"](runner)``)
with the MLA mock model runner from SGLang's own test kit
(``sglang.test.kits.attention_unittest``), so the real ``TritonAttnBackend.__init__``,
``init_forward_metadata`` (TARGET_VERIFY branch) and ``forward_extend`` run. Only the
batch contents are made here: shuffled token slots in ``req_to_token``, committed-prefix
``seq_lens`` (draft excluded, as in verify), draft slots in ``out_cache_loc``, the FULL-layout
custom mask and random bf16 latents.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import torch

_PARALLEL_OVERRIDE: Any = None  # kept referenced: SGLang restores an override when it is collected


def publish_single_rank() -> None:
    """Say "one attention rank, no decode context parallelism" to SGLang's runtime context."""
    global _PARALLEL_OVERRIDE
    if _PARALLEL_OVERRIDE is not None:
        return
    from sglang.srt.runtime_context import get_parallel

    _PARALLEL_OVERRIDE = get_parallel().override(attn_tp_size=1, attn_dcp_size=1, attn_dcp_rank=0)
    _PARALLEL_OVERRIDE.__enter__()


def full_layout_mask(prefix_lens: Sequence[int], n: int, visibility: torch.Tensor | None, device: Any) -> torch.Tensor:
    """uint8 FULL_MASK: per request n x (L+n) cells; prefix columns 1, draft block = visibility."""
    vis = visibility if visibility is not None else torch.tril(torch.ones(n, n, dtype=torch.bool))
    parts = []
    for L in prefix_lens:
        m = torch.ones(n, L + n, dtype=torch.uint8)
        m[:, L:] = vis.to(torch.uint8)
        parts.append(m.reshape(-1))
    return torch.cat(parts).to(device)


@dataclass
class VerifyBatch:
    runner: Any
    backend: Any
    layer: Any
    forward_batch: Any
    q: torch.Tensor  # [T, H*576]
    k: torch.Tensor  # [T, 1, 576]
    v: torch.Tensor  # [T, 1, 512]
    prefix_lens: tuple
    n: int
    heads: int
    req_to_token: torch.Tensor

    def prefix_slots(self, b: int) -> torch.Tensor:
        return self.req_to_token[b, : self.prefix_lens[b]].to(torch.int64)


def build_verify_batch(
    prefix_lens: Sequence[int],
    n: int,
    heads: int,
    *,
    device: str = "cpu",
    seed: int = 0,
    sm_scale: float | None = None,
    visibility: torch.Tensor | None = None,
    kv_lora_rank: int = 512,
    qk_rope_head_dim: int = 64,
    fp8_kv_cache: bool = False,
) -> VerifyBatch:
    """A TARGET_VERIFY batch of len(prefix_lens) requests with n draft tokens each."""
    from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
    from sglang.test.kits.attention_unittest.attention_methods.mla_attention import (
        MLAAttentionCase,
        MockMLAModelRunner,
        TinyMLAModelConfig,
    )

    publish_single_rank()
    prefix_lens = tuple(int(x) for x in prefix_lens)
    bs = len(prefix_lens)
    ctx = max(prefix_lens) + n + 1
    head_dim = kv_lora_rank + qk_rope_head_dim
    case = MLAAttentionCase(
        name="target_verify",
        backend="triton",
        forward_mode=ForwardMode.TARGET_VERIFY,
        num_heads=heads,
        page_size=1,
        prefix_lens=prefix_lens,
        extend_lens=(n,) * bs,
    )
    cfg = TinyMLAModelConfig(
        num_heads=heads, kv_lora_rank=kv_lora_rank, qk_rope_head_dim=qk_rope_head_dim, hidden_size=64, context_len=ctx
    )
    runner = MockMLAModelRunner(
        case=case,
        model_config=cfg,
        dtype=torch.bfloat16,
        device=device,
        max_context_len=ctx,
        kv_lora_rank=kv_lora_rank,
        qk_rope_head_dim=qk_rope_head_dim,
        fp8_kv_cache=fp8_kv_cache,
    )
    backend = ATTENTION_BACKENDS["triton"](runner)

    gen = torch.Generator().manual_seed(seed)
    pool = runner.token_to_kv_pool
    n_slots = pool.get_key_buffer(0).shape[0]
    # Shuffled slots (slot 0 is SGLang's padding slot): catches any index mix-up.
    slots = torch.randperm(n_slots - 1, generator=gen)[: sum(L + n for L in prefix_lens)] + 1
    r2t = runner.req_to_token_pool.req_to_token
    out_cache_loc, pos, at = [], [], 0
    for b, L in enumerate(prefix_lens):
        r2t[b, : L + n] = slots[at : at + L + n].to(r2t.dtype).to(r2t.device)
        out_cache_loc += slots[at + L : at + L + n].tolist()
        pos += list(range(L, L + n))
        at += L + n

    layer = RadixAttention(
        num_heads=heads,
        head_dim=head_dim,
        scaling=sm_scale if sm_scale is not None else head_dim**-0.5,
        num_kv_heads=1,
        layer_id=0,
        v_head_dim=kv_lora_rank,
    )
    # Committed prefix KV, written through the pool like SGLang's prefill did.
    all_prefix = (
        torch.cat([r2t[b, :L].to(torch.int64) for b, L in enumerate(prefix_lens)]) if sum(prefix_lens) else None
    )
    if all_prefix is not None:
        rows = torch.randn(all_prefix.numel(), 1, head_dim, generator=gen).to(torch.bfloat16).to(device)
        pool.set_kv_buffer(layer, all_prefix.to(device), rows, rows[..., :kv_lora_rank])

    T = bs * n
    seq = torch.tensor(prefix_lens, dtype=torch.int32)
    fb = ForwardBatch(
        forward_mode=ForwardMode.TARGET_VERIFY,
        batch_size=bs,
        input_ids=torch.zeros(T, dtype=torch.int64, device=device),
        req_pool_indices=torch.arange(bs, dtype=torch.int32, device=device),
        seq_lens=seq.to(device),
        seq_lens_cpu=seq.clone(),
        seq_lens_sum=int(seq.sum()),
        out_cache_loc=torch.tensor(out_cache_loc, dtype=torch.int64, device=device),
        positions=torch.tensor(pos, dtype=torch.int64, device=device),
    )
    runner.kv_index_translator.bind_own_plan(fb)
    fb.spec_info = SimpleNamespace(
        custom_mask=full_layout_mask(prefix_lens, n, visibility, device), num_tokens_per_req=n
    )
    q = (torch.randn(T, heads * head_dim, generator=gen) * 0.5).to(torch.bfloat16).to(device)
    k = torch.randn(T, 1, head_dim, generator=gen).to(torch.bfloat16).to(device)
    v = k[..., :kv_lora_rank].contiguous()  # SGLang passes k_nope as a separate tensor
    return VerifyBatch(runner, backend, layer, fb, q, k, v, prefix_lens, n, heads, r2t)
