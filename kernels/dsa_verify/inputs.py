"""Synthetic GLM-5-shaped DSA verify inputs, built the way SGLang's dsa backend builds them.

A request b has a committed prefix of L_b tokens and n chain drafts whose KV is already in the
cache (set_mla_kv_buffer runs before the kernel): its L_b + n tokens live in scattered 64-token
pages (page 0 = SGLang's dummy page, never used). Draft i is one verify row whose causal range is
positions [0, L_b + i]; the indexer keeps the top `topk` of them:
  - L_b + i + 1 <= topk: the row lists every causal position (itself and earlier drafts
    included), in score order, -1 padded at the tail; seq_len = L_b + i + 1;
  - otherwise the row lists the top-k positions of a synthetic indexer score and seq_len = topk.
Synthetic indexer: score_i(pos) = k_pos . q_i with k_pos ~ N(0, I_64) per position and
q_i = sqrt(rho) q_shared + sqrt(1 - rho) z_i per draft (rho = the correlation of consecutive
drafts' indexer queries; real indexer scores are not available here, so overlap numbers from
these inputs are labelled synthetic). Options: fp8 656-byte rows (SGLang's quantizer), extreme
per-block fp8 scales (2^-62..2^62, compensated in q so the logits stay O(1)), scale spikes (1 slot in 256
with one block's scale x 2^9), hostile indices
(negative, >= slots, INT32_MAX inside the valid range; seq_lens < 0 or > topk), graph-padding
rows (seq_len 1, all -1), and NaN-poisoned unused slots (rows no used entry points at).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

PAGE = 64


@dataclass(frozen=True)
class DsaCase:
    name: str
    prefixes: tuple  # committed prefix length per request
    n: int  # chain drafts per request (verify rows per request)
    heads: int
    kv: str = "bf16"  # "bf16" or "fp8"
    topk: int = 2048
    seed: int = 0
    rho: float = 0.9
    extreme_scales: bool = False
    scale_spikes: bool = False  # fp8: 1 slot in 256 with block 3's scale x 2^9 (q's block 3 x 2^-9)
    hostile: bool = False
    pad_rows: int = 0  # extra CUDA-graph padding rows (seq_len 1, all -1)
    poison: bool = True
    sm_scale: float = 0.0625  # GLM-5: (192 + 64) ** -0.5
    notes: str = ""

    @property
    def rows(self) -> int:
        return len(self.prefixes) * self.n + self.pad_rows


def request_slots(prefixes, n: int, gen, spare_pages: int = 2):
    """Per request a LongTensor of its L+n physical slots (scattered 64-token pages), and the
    cache size in slots (page 0 dummy + used pages + `spare_pages` unused pages)."""
    import torch

    need = [math.ceil((L + n) / PAGE) for L in prefixes]
    total = sum(need) + spare_pages
    perm = torch.randperm(total, generator=gen) + 1  # page ids 1..total (0 is the dummy page)
    out, at = [], 0
    for L, k in zip(prefixes, need):
        pages = perm[at : at + k]
        at += k
        slots = (pages[:, None] * PAGE + torch.arange(PAGE)[None, :]).reshape(-1)
        out.append(slots[: L + n].clone())
    return out, (total + 1) * PAGE


def indexer_positions(L: int, n: int, topk: int, rho: float, gen, device):
    """[n, topk] int64 positions (-1 padded) and [n] seq_lens for one request's chain drafts."""
    import torch

    c = L + n
    dim = 64
    kpos = torch.randn(c, dim, generator=gen).to(device)
    q0 = torch.randn(dim, generator=gen)
    z = torch.randn(n, dim, generator=gen)
    q = (math.sqrt(rho) * q0[None, :] + math.sqrt(max(0.0, 1 - rho)) * z).to(device)
    scores = q @ kpos.T  # [n, c]
    pos = torch.arange(c, device=device)
    causal = pos[None, :] <= (L + torch.arange(n, device=device))[:, None]
    scores = scores.masked_fill(~causal, float("-inf"))
    out = torch.full((n, topk), -1, dtype=torch.long, device=device)
    lens = torch.empty(n, dtype=torch.int32)
    for i in range(n):
        ci = L + i + 1
        k = min(ci, topk)
        top = torch.topk(scores[i], k).indices
        out[i, :k] = top
        lens[i] = k
    return out, lens.to(device)


def make_inputs(case: DsaCase, device, gen_seed: int | None = None) -> dict:
    """q_all, kv_cache, page_table_1, seq_lens, sm_scale (+ meta) for `case` on `device`."""
    import torch

    from .layout import quantize_rows

    gen = torch.Generator().manual_seed(case.seed if gen_seed is None else gen_seed)
    dgen = torch.Generator(device=device).manual_seed(case.seed * 7919 + 1)
    slots, num_slots = request_slots(case.prefixes, case.n, gen)
    rows = []
    lens = []
    for b, L in enumerate(case.prefixes):
        pos, sl = indexer_positions(L, case.n, case.topk, case.rho, gen, device)
        s_b = slots[b].to(device)
        pt = torch.where(pos >= 0, s_b[pos.clamp(min=0)], torch.full_like(pos, -1))
        rows.append(pt)
        lens.append(sl)
    if case.pad_rows:
        rows.append(torch.full((case.pad_rows, case.topk), -1, dtype=torch.long, device=device))
        lens.append(torch.ones(case.pad_rows, dtype=torch.int32, device=device))
    page_table = torch.cat(rows).to(torch.int32).contiguous()
    seq_lens = torch.cat(lens).to(torch.int32).contiguous()
    T, H = page_table.shape[0], case.heads
    if case.hostile:
        hostile_vals = torch.tensor([-1, -7, num_slots, num_slots + 12345, 2**31 - 1, -(2**31)], dtype=torch.int32)
        pick = torch.rand(page_table.shape, generator=gen) < 0.05
        vals = hostile_vals[torch.randint(0, len(hostile_vals), page_table.shape, generator=gen)]
        page_table = torch.where(pick.to(device), vals.to(device), page_table).contiguous()
        if T >= 4:
            seq_lens[0] = case.topk + 1000  # clamped to topk
            seq_lens[1] = -5  # empty row
            seq_lens[2] = 0
    q = torch.randn(T, H, 576, generator=dgen, device=device)
    kv = torch.randn(num_slots, 576, generator=dgen, device=device)
    if case.kv == "fp8":
        mult = None
        if case.extreme_scales:
            # per 128-dim block k a shared exponent e_k in [-60, 60] (plus a per-slot factor in
            # [1/4, 4]) multiplies the stored fp32 scales; q's block k is divided by 2^e_k so the
            # logits stay O(1) while the dequantized K/V magnitudes span 2^-62..2^62
            e = torch.randint(-60, 61, (4,), generator=gen).float()
            jitter = torch.rand(num_slots, 4, generator=gen) * 4 - 2
            mult = torch.exp2(e[None, :] + jitter).to(device)
            qcomp = torch.exp2(-e).to(device)
            q[..., :512] = (q[..., :512].reshape(T, H, 4, 128) * qcomp[None, None, :, None]).reshape(T, H, 512)
        if case.scale_spikes:
            # a split's later tile holds a scale far above its first tile's (w64's lazy sigma takes its exact step); q's
            # block 3 is divided by the spike so the logits stay O(1)
            spike = torch.rand(num_slots, generator=gen) < 1 / 256
            m = torch.ones(num_slots, 4)
            m[spike, 3] = 2.0**9
            mult = m.to(device) if mult is None else mult * m.to(device)
            q[..., 384:512] *= 2.0**-9
        cache = quantize_rows(kv.to(torch.bfloat16), mult).reshape(num_slots, 1, 656)
    else:
        cache = kv.to(torch.bfloat16).reshape(num_slots, 1, 576)
    if case.poison:
        from .reference import used_mask

        used = used_mask(page_table, seq_lens, num_slots)
        live = torch.zeros(num_slots, dtype=torch.bool, device=device)
        live[page_table.long()[used]] = True
        dead = ~live
        if case.kv == "fp8":
            cache.view(num_slots, 656)[dead] = 0x7F  # e4m3 NaN bytes, NaN scales
        else:
            cache.view(num_slots, 576)[dead] = float("nan")
    return {
        "q_all": q.to(torch.bfloat16).contiguous(),
        "kv_cache": cache,
        "page_table_1": page_table,
        "seq_lens": seq_lens,
        "sm_scale": case.sm_scale,
        "meta": {"T": T, "H": H, "num_slots": num_slots, "slots": slots},
    }


def topk_overlap(page_table_1, seq_lens, n: int) -> dict:
    """Overlap of consecutive draft rows' used-slot sets within each request (rows grouped by n):
    mean |S_i & S_i+1| / |S_i+1| and the unique-slot fraction per request (1.0 = no sharing)."""
    import torch

    T = page_table_1.shape[0] // n * n
    ov, uniq = [], []
    for r0 in range(0, T, n):
        sets = []
        for i in range(n):
            k = int(max(0, min(int(seq_lens[r0 + i]), page_table_1.shape[1])))
            row = page_table_1[r0 + i, :k]
            sets.append(set(row[row >= 0].tolist()))
        for i in range(n - 1):
            if sets[i + 1]:
                ov.append(len(sets[i] & sets[i + 1]) / len(sets[i + 1]))
        tot = sum(len(s) for s in sets)
        if tot:
            uniq.append(len(set().union(*sets)) / tot)
    del torch
    return {
        "consecutive_overlap_mean": sum(ov) / len(ov) if ov else None,
        "unique_fraction_mean": sum(uniq) / len(uniq) if uniq else None,
    }
