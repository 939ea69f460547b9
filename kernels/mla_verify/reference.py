"""Reference MLA target-verify attention in float64 (or fp32) PyTorch; CPU or GPU.

Semantics (identical to mla_verify.mla_verify_fwd and SGLang extend_attention_fwd with
a custom mask): request b has draft tokens qo_indptr[b]:qo_indptr[b+1] (n_b of them) and a
committed prefix of L_b = kv_indptr[b+1]-kv_indptr[b] slots kv_indices[kv_indptr[b]:...].
Keys of draft row i: the gathered prefix rows k_buffer[slot, 0, :576] then the draft rows
k_extend[qo_indptr[b]:..., 0, :]; values: v_buffer[slot, 0, :512] then v_extend rows.
Row i sees every prefix key and draft key j iff custom_mask[mask_indptr[b] + i*(L_b+n_b) + L_b + j]
is nonzero (FULL layout; the prefix columns are never read). Without a mask: j <= i when
is_causal, else every draft key. Exact softmax of sm_scale * q.k (sm_scale default 576**-0.5).
Returns o [T, H, 512] in `dtype`.
"""

from __future__ import annotations


def draft_visibility(custom_mask, mask_indptr, b: int, L: int, n: int, is_causal: bool, device=None):
    """[n, n] bool: row i may attend draft key j (reads only the draft columns of the FULL mask)."""
    import torch

    if custom_mask is not None:
        start = int(mask_indptr[b])
        block = custom_mask[start : start + n * (L + n)].reshape(n, L + n)
        return block[:, L:].to(torch.bool).to(device)
    if is_causal:
        return torch.tril(torch.ones(n, n, dtype=torch.bool, device=device))
    return torch.ones(n, n, dtype=torch.bool, device=device)


def mla_verify_ref(
    q_extend,
    k_extend,
    v_extend,
    k_buffer,
    v_buffer,
    qo_indptr,
    kv_indptr,
    kv_indices,
    custom_mask,
    is_causal,
    mask_indptr,
    sm_scale=None,
    dtype=None,
):
    """Reference output [T, H, 512] (float64 by default) for the inputs above."""
    import torch

    dtype = dtype or torch.float64
    T, H, dqk = q_extend.shape
    dv = v_buffer.shape[-1]
    scale = float(sm_scale) if sm_scale is not None else dqk**-0.5
    out = torch.zeros(T, H, dv, dtype=dtype, device=q_extend.device)
    qo = [int(x) for x in qo_indptr.tolist()]
    kv = [int(x) for x in kv_indptr.tolist()]
    for b in range(len(qo) - 1):
        q0, q1 = qo[b], qo[b + 1]
        n = q1 - q0
        if n <= 0:
            continue
        slots = kv_indices[kv[b] : kv[b + 1]].long()
        L = slots.numel()
        k = torch.cat([k_buffer[slots, 0, :].to(dtype), k_extend[q0:q1, 0, :].to(dtype)], 0)  # [L+n, 576]
        v = torch.cat([v_buffer[slots, 0, :].to(dtype), v_extend[q0:q1, 0, :].to(dtype)], 0)  # [L+n, 512]
        q = q_extend[q0:q1].to(dtype)  # [n, H, 576]
        logits = torch.einsum("nhd,kd->nhk", q, k) * scale  # [n, H, L+n]
        vis = draft_visibility(custom_mask, mask_indptr, b, L, n, is_causal, device=logits.device)
        full = torch.ones(n, L + n, dtype=torch.bool, device=logits.device)
        full[:, L:] = vis
        logits = logits.masked_fill(~full[:, None, :], float("-inf"))
        p = torch.softmax(logits, dim=-1)
        out[q0:q1] = torch.einsum("nhk,kd->nhd", p, v)
    return out
