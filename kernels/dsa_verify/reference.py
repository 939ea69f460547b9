"""Reference sparse (DSA) MLA verify attention in float64 (or fp32) PyTorch; CPU or GPU.

Semantics (identical to dsa_verify.dsa_verify_fwd): row t uses the entries p of
page_table_1[t] with p < clamp(seq_lens[t], 0, topk) and 0 <= slot < kv slots (other entries,
-1 padding included, are skipped); keys are the gathered cache rows (fp8 rows dequantized:
e4m3 * per-128-dim scale, rope bf16), values their first 512 dims; exact softmax of
sm_scale * q.k over the used entries (a slot listed twice counts twice). A row with no used
entry gives o = 0 and lse = -inf. Returns (o [T, H, 512], lse [T, H] natural log) in `dtype`.
"""

from __future__ import annotations

from .layout import FP8_ROW_BYTES, cache_rows, dequantize_rows


def used_mask(page_table_1, seq_lens, num_slots: int):
    """[T, topk] bool: entry used by the kernel (position < clamped seq_len, slot in range)."""
    import torch

    topk = page_table_1.shape[1]
    nv = seq_lens.long().clamp(0, topk)
    pos = torch.arange(topk, device=page_table_1.device)
    idx = page_table_1.long()
    return (pos[None, :] < nv[:, None]) & (idx >= 0) & (idx < num_slots)


def dsa_verify_ref(q_all, kv_cache, page_table_1, seq_lens, sm_scale: float, dtype=None, block_rows: int = 8):
    import torch

    dtype = dtype or torch.float64
    rows = cache_rows(kv_cache)
    fp8 = rows.shape[-1] == FP8_ROW_BYTES
    if fp8:
        rows = rows.view(torch.uint8)
    T, H, _ = q_all.shape
    out = torch.zeros(T, H, 512, dtype=dtype, device=q_all.device)
    lse = torch.full((T, H), float("-inf"), dtype=dtype, device=q_all.device)
    used = used_mask(page_table_1, seq_lens, rows.shape[0])
    for t0 in range(0, T, block_rows):
        t1 = min(T, t0 + block_rows)
        u = used[t0:t1]
        safe = torch.where(u, page_table_1[t0:t1].long(), torch.zeros_like(u, dtype=torch.long))
        g = rows[safe.reshape(-1)]
        k = dequantize_rows(g, dtype) if fp8 else g.to(dtype)
        k = k.reshape(t1 - t0, -1, 576)
        k = torch.where(u[..., None], k, torch.zeros((), dtype=dtype, device=k.device))  # never 0 * NaN
        s = torch.einsum("thd,tkd->thk", q_all[t0:t1].to(dtype), k) * float(sm_scale)
        s = s.masked_fill(~u[:, None, :], float("-inf"))
        m = torch.logsumexp(s, dim=-1)  # -inf for empty rows
        p = torch.where(torch.isfinite(m)[..., None], torch.exp(s - m[..., None].nan_to_num(neginf=0.0)), 0.0)
        p = p.masked_fill(~u[:, None, :], 0.0)
        out[t0:t1] = torch.einsum("thk,tkd->thd", p, k[..., :512])
        lse[t0:t1] = m
    return out, lse
