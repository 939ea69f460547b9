"""Microbenchmark of the sparse (DSA) MLA verify kernel (phase 2): ratios measured in one run.

Usage: python -m verify_tools.dsa_bench [--json] [--quick] [--shapes B:L:n:H,...] [--budget-s SECONDS] [--reps N]

Grid: B 1/8/32 requests x L 4k/32k/128k prefix x n 4/8 chain drafts (T = B*n rows) x H 8/64
heads x bf16/fp8 (656-byte rows) KV, topk 2048, sm_scale 1/16, inputs from dsa_verify/inputs.py
(scattered 64-token pages, synthetic-indexer top-k, rho 0.9). The headline shapes run first;
--budget-s stops the grid when its time is spent and lists the shapes left out.
Timing: every kernel is captured in a CUDA graph; each replay follows an L2 flush (bitwise_not
over a buffer twice the L2 size). Two numbers per kernel, same method for ours and the peer:
the CUPTI kernel span per replay (torch.profiler records; first kernel start to last kernel end
of the call; the `*_s`, `sol` and `speedup_*` columns) and the CUDA-event time around each replay
(`*_replay_s`, the old number, which carries the replay's launch/event overhead), medians of --reps.
Ceilings measured in the same run: copy bandwidth (device-to-device copy of 1 GiB, bytes read +
written) and bf16 matmul rate (8192^3). floor = max(bytes / BW, FLOPs / F) with bytes = the used
KV rows (row bytes each: 1152 bf16, 656 fp8) + indices + q + out, FLOPs = 2 * rows * H * used *
(576 + 512). `floor` counts every row's entries (no sharing: what every incumbent reads);
`floor_shared` counts each distinct slot of a request once (the gain available to a kernel that
reads a slot shared by several draft rows once). Peers: SGLang 0.5.23's DSA Triton kernel
`triton_sparse_mla_fwd` (bf16 cache; it cannot read the 656-byte fp8 rows, so fp8 rows compare
against our own bf16 time); FlashMLA (sgl-flash-mla 1.0.0's `flash_mla`, legacy kernels, sm_90 /
sm_100: fp8 rows through its sparse decode as SGLang's `flashmla_kv` calls it, bf16 rows through its
sparse prefill kernel; FLASHMLA_ENTRY; the `flashmla` key of each row: CUPTI span `s`, or `skipped`
with the reason; ran on the H200 in DSA run 10, 2026-12-01); FA3 (skipped: not installed). `summary` holds what phase 2
gates (SUMMARY_SHAPES). Exit 0 ran, 1 a kernel failed, 75 no CUDA device.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import time

from dsa_verify import tiles
from dsa_verify.inputs import DsaCase, make_inputs, topk_overlap
from tool_contract import EXIT_BLOCKED, emit
from tool_contract import blocked_doc as tool_blocked_doc
from verify_tools.bench import parse_shapes

SM_SCALE = 0.0625
FLASHMLA_AGREE = 1e-2  # FlashMLA vs ours, rel. Frobenius: above it the peer is not named fastest
TOPK = 2048
HEADLINE = ((1, 32768, 4, 8), (1, 32768, 8, 8), (8, 32768, 8, 8), (32, 32768, 8, 8), (32, 32768, 8, 64))


# The summary block (phase 2's dsa gates read it, not row indices): (B, L, n, H, kv) of each shape.
SUMMARY_SHAPES = {
    "headline": (1, 32768, 4, 8, "bf16"),  # GLM-5 MTP verify at TP8
    "t256": (32, 32768, 8, 8, "bf16"),  # T = 256: the busy, memory-bound regime
    "t64_fp8": (8, 32768, 8, 8, "fp8"),  # T = 64 with the 656-byte fp8 rows
}
SUMMARY_KEYS = (
    "headline_speedup_vs_sglang_triton",
    "headline_sol",
    "headline_ours_s",
    "headline_sglang_triton_s",
    "headline_speedup_vs_flashmla",
    "t256_sol",
    "t64_fp8_over_bf16_time",
    "fastest_per_shape",
    "rows",
)

# FlashMLA (sgl-flash-mla 1.0.0, legacy kernels) as SGLang 0.5.23 calls it on sm_90:
#   fp8 656-byte rows: flash_mla_with_kvcache sparse decode (DSA backend `flashmla_kv`,
#     `_forward_flashmla_kv`): q [T, 1, 64, 576] (heads zero-padded to 64, or 128 above 64), the
#     cache viewed as pages of 64 [slots / 64, 64, 1, 656] with page_table_1 [T, 1, 2048] as the
#     per-token indices (page * 64 + offset = the slot id), kv_format "V32", metadata from
#     get_mla_decoding_metadata(seq_lens, 1 * 64, 1, 64, True, 2048), an empty block table.
#   bf16 rows: FlashMLA's only sparse bf16 entry is its sparse PREFILL kernel flash_mla_sparse_fwd
#     (SGLang's `flashmla_sparse` impl, its bf16 prefill default on sm_90; SGLang's bf16 verify on
#     sm_90 runs FA3, not FlashMLA): q [T, 64, 576], kv [slots, 1, 576], indices [T, 1, 2048],
#     topk_length = seq_lens.
# The head padding is done once outside the timed call (SGLang pads per call: one small copy more).
FLASHMLA_ENTRY = {
    "fp8": "flash_mla_with_kvcache (sparse decode, V32, legacy; SGLang flashmla_kv)",
    "bf16": "flash_mla_sparse_fwd (sparse prefill kernel, legacy; SGLang flashmla_sparse)",
}
FLASHMLA_PAGE = 64
FLASHMLA_SPARSE_ARCHS = ((9, 0), (10, 0), (10, 3))  # the legacy sparse kernels: sm_90a or sm_100f


def flashmla_heads(H: int) -> int:
    """The q head count FlashMLA's sparse kernels take for H heads (SGLang's padding rule)."""
    return 64 if H <= 64 else 128 if H <= 128 else H


def flashmla_args(q, kv, page_table_1, seq_lens, kvname: str) -> dict:
    """FlashMLA's tensors for one call on the bench's inputs (pure torch, CPU or GPU): q_all [T, H, 576]
    bf16, kv [slots, 1, 576] bf16 or [slots, 1, 656] uint8, page_table_1 [T, topk] int32, seq_lens
    [T] int32. Raises ValueError where FlashMLA cannot take the inputs."""
    import torch

    T, H, D = q.shape
    hp = flashmla_heads(H)
    qp = q.new_zeros(T, hp, D)
    qp[:, :H] = q
    topk = page_table_1.shape[-1]
    idx = page_table_1.to(torch.int32).reshape(T, 1, topk).contiguous()
    sl = seq_lens.to(torch.int32).contiguous()
    if kvname == "bf16":
        return {
            "kv": kvname,
            "H": H,
            "q": qp,
            "kv_cache": kv.reshape(kv.shape[0], 1, kv.shape[-1]),
            "indices": idx,
            "topk_length": sl,
        }
    if kv.shape[-1] != 656 or kv.shape[0] % FLASHMLA_PAGE:
        raise ValueError(f"fp8 cache must be [slots, 1, 656] with slots % {FLASHMLA_PAGE} == 0, got {tuple(kv.shape)}")
    return {
        "kv": kvname,
        "H": H,
        "q": qp.view(T, 1, hp, D),
        "kv_cache": kv.reshape(-1, FLASHMLA_PAGE, 1, 656),
        "indices": idx,
        "cache_seqlens": sl,
        "block_table": torch.empty((T, 0), dtype=torch.int32, device=q.device),
    }


def flashmla_fn(fm, args: dict, sm_scale: float):
    """A callable running FlashMLA on `args` (flashmla_args) and returning its raw output; the
    scheduling metadata (fp8 decode) is computed here, once, outside the timed call. NOT RUN ON A
    GPU YET (written 2026-12-01 without device time)."""
    if args["kv"] == "bf16":
        q, kv, idx, tl = args["q"], args["kv_cache"], args["indices"], args["topk_length"]
        return lambda: fm.flash_mla_sparse_fwd(q, kv, idx, sm_scale, 512, None, tl, use_legacy=True)[0]
    q, kc, idx, sl, bt = args["q"], args["kv_cache"], args["indices"], args["cache_seqlens"], args["block_table"]
    hp = q.shape[2]
    meta, splits = fm.get_mla_decoding_metadata(sl, q.shape[1] * hp, 1, hp, True, idx.shape[-1], use_legacy=True)
    sched = fm.flash_mla_interface.FlashMLASchedMeta(tile_scheduler_metadata=meta, num_splits=splits)
    return lambda: fm.flash_mla_with_kvcache(
        q,
        kc,
        bt,
        sl,
        512,
        sched,
        softmax_scale=sm_scale,
        is_fp8_kvcache=True,
        indices=idx,
        kv_format="V32",
        use_legacy=True,
    )[0]


def flashmla_out(o, H: int):
    """FlashMLA's output ([T, Hp, 512] prefill or [T, 1, Hp, 512] decode) as ours: [T, H, 512]."""
    return (o[:, 0] if o.dim() == 4 else o)[:, :H]


def shape_label(r: dict) -> str:
    return f"B{r['B']}_L{r['L']}_n{r['n']}_H{r['H']}_{r['kv']}"


def summarize(rows: list) -> dict:
    """The gate block: the headline shape's speedup vs SGLang's Triton kernel and SOL, T=256's SOL,
    fp8 / bf16 time at T=64, and the fastest kernel (ours or a peer) per shape. A shape not
    measured gives None (a gate on it then fails)."""
    by = {(r["B"], r["L"], r["n"], r["H"], r["kv"]): r for r in rows}
    h = by.get(SUMMARY_SHAPES["headline"], {})
    t256 = by.get(SUMMARY_SHAPES["t256"], {})
    t64 = by.get(SUMMARY_SHAPES["t64_fp8"], {})
    st = h.get("sglang_triton") if isinstance(h.get("sglang_triton"), dict) else {}
    return {
        "headline_speedup_vs_sglang_triton": h.get("speedup_vs_sglang_triton"),
        "headline_sol": h.get("sol"),
        "headline_ours_s": h.get("ours_s"),
        "headline_sglang_triton_s": st.get("s"),
        "headline_speedup_vs_flashmla": h.get("speedup_vs_flashmla"),
        "t256_sol": t256.get("sol"),
        "t64_fp8_over_bf16_time": t64.get("fp8_over_bf16_time"),
        "fastest_per_shape": {shape_label(r): r.get("fastest") for r in rows},
        "rows": len(rows),
    }


def blocked_doc(reason: str) -> dict:
    """The document of a run that could not measure: every gate path present, no number."""
    return tool_blocked_doc(
        reason,
        device=None,
        sglang_triton=None,
        flashmla=None,
        rows=[],
        left_out=[],
        summary={k: None for k in SUMMARY_KEYS},
    )


def grid(quick: bool) -> list[tuple]:
    rest = [
        (b, L, n, h)
        for h in (8, 64)
        for b in (1, 8, 32)
        for L in (4096, 32768, 131072)
        for n in (4, 8)
        if (b, L, n, h) not in HEADLINE
    ]
    return list(HEADLINE) + ([] if quick else rest)


def measure_ceilings(device) -> dict:
    import torch

    n = 1 << 29  # 1 GiB of bf16
    a = torch.empty(n, dtype=torch.bfloat16, device=device).normal_()
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    torch.cuda.synchronize()
    ts = []
    for _ in range(10):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        b.copy_(a)
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e) * 1e-3)
    bw = 2 * a.numel() * 2 / statistics.median(ts)
    a = b = None
    m = 8192
    x = torch.randn(m, m, dtype=torch.bfloat16, device=device)
    y = torch.randn(m, m, dtype=torch.bfloat16, device=device)
    for _ in range(3):
        x @ y
    torch.cuda.synchronize()
    ts = []
    for _ in range(10):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        x @ y
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e) * 1e-3)
    flops = 2 * m**3 / statistics.median(ts)
    return {"copy_bytes_per_s": bw, "bf16_matmul_flops_per_s": flops}


FLUSH_KERNEL = "bitwise_not"  # the L2 flush's kernel name (a kernel no timed callable launches)


class Timer:
    """Graph-captured callables, two timings of each (the same method for ours and the peer):

    - `time` (column `*_replay_s`, the old number): CUDA events around each graph replay, after
      an L2 flush, median of reps. It includes the replay's own launch and event overhead
      (an empty graph measures ~3.4 us on the H200), identical for every kernel.
    - `kernel_spans` (column `*_s`, the ratios' column): CUPTI kernel records (torch.profiler) of
      reps replays, each after an L2 flush: per replay, first kernel start to last kernel end of
      the callable's kernels (a two-kernel call counts its gap), median of reps. This measures the
      kernels, not the replay's launch/event overhead.
    The flush is bitwise_not over an int32 buffer of 2 x L2 bytes (read + written)."""

    def __init__(self, device):
        import torch

        l2 = torch.cuda.get_device_properties(device).L2_cache_size
        self.flush_buf = torch.zeros(max(2 * l2, 1 << 26) // 4, dtype=torch.int32, device=device)
        self.captured: list = []  # every captured callable: see graph()

    def flush(self):
        import torch

        torch.bitwise_not(self.flush_buf, out=self.flush_buf)

    def graph(self, fn):
        """fn captured in a CUDA graph (after 2 warm-up calls on a side stream). The timer keeps fn, and so the
        tensors it closes over, alive: a graph owns none of the memory its kernels address, and a buffer freed
        after capture is handed to the next allocation while the graph still writes it (session 16: a tree
        A/B's workspace, freed per variant, ended in an illegal address)."""
        import torch

        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):
                fn()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        g.replay()
        torch.cuda.synchronize()
        self.captured.append(fn)
        return g

    def time(self, fn, reps: int, g=None) -> float:
        import torch

        g = g or self.graph(fn)
        ts = []
        for _ in range(reps):
            self.flush()
            st, en = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            st.record()
            g.replay()
            en.record()
            en.synchronize()
            ts.append(st.elapsed_time(en) * 1e-3)
        return statistics.median(ts)

    def kernel_spans(self, graphs: dict, reps: int, fns: dict | None = None) -> dict:
        """{label: {"s": median span, "sum_s": median summed kernel time, "kernels": names}} of
        each graph in `graphs` ({label: CUDAGraph}), from CUPTI records of reps flushed replays.
        If the records do not split into one flushed segment per replay (a profiler that does not
        see graph kernels), the callables `fns` ({label: fn}) are profiled as direct calls instead
        ("via": "direct")."""
        res = self._spans({k: g.replay for k, g in graphs.items()}, reps)
        if fns and any("error" in v for v in res.values()):
            res = self._spans({k: fns[k] for k in graphs}, reps)
            for v in res.values():
                v["via"] = "direct"
        return res

    def _spans(self, calls: dict, reps: int) -> dict:
        import os
        import tempfile

        import torch
        from torch.profiler import ProfilerActivity, profile

        labels = list(calls)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for lab in labels:
                for _ in range(reps):
                    self.flush()
                    calls[lab]()
            torch.cuda.synchronize()
        fd, path = tempfile.mkstemp(suffix=".json")
        os.close(fd)
        try:
            prof.export_chrome_trace(path)
            with open(path) as f:
                trace = json.load(f)
        finally:
            os.unlink(path)
        ks = [e for e in trace.get("traceEvents", []) if e.get("cat") == "kernel" and "ts" in e and "dur" in e]
        ks.sort(key=lambda e: float(e["ts"]))
        segs, cur = [], None
        for e in ks:
            if FLUSH_KERNEL in e.get("name", ""):
                cur = []
                segs.append(cur)
            elif cur is not None:
                cur.append(e)
        out = {}
        if len(segs) != len(labels) * reps or any(not sg for sg in segs):
            for lab in labels:
                out[lab] = {"error": f"CUPTI: {len(segs)} flushed segments for {len(labels) * reps} replays"}
            return out
        for i, lab in enumerate(labels):
            spans, sums = [], []
            for sg in segs[i * reps : (i + 1) * reps]:
                t0 = min(float(e["ts"]) for e in sg)
                t1 = max(float(e["ts"]) + float(e["dur"]) for e in sg)
                spans.append((t1 - t0) * 1e-6)
                sums.append(sum(float(e["dur"]) for e in sg) * 1e-6)
            names = sorted({e["name"][:80] for e in segs[i * reps]})
            out[lab] = {"s": statistics.median(spans), "sum_s": statistics.median(sums), "kernels": names}
        return out


def shape_bytes(d: dict, H: int, row_bytes: int, shared: bool) -> tuple[int, int]:
    """(bytes, used entries) of one call: used KV rows (distinct per request if `shared`) + idx + q + out."""
    import torch

    from dsa_verify.reference import used_mask

    pt, sl = d["page_table_1"], d["seq_lens"]
    T = pt.shape[0]
    used = used_mask(pt, sl, d["meta"]["num_slots"])
    n_used = int(used.sum())
    if shared:
        n_rows = 0
        n = d["n"]
        for r0 in range(0, T, n):
            u = used[r0 : r0 + n]
            n_rows += int(torch.unique(pt[r0 : r0 + n][u]).numel())
    else:
        n_rows = n_used
    byt = n_rows * row_bytes + T * TOPK * 4 + T * 4 + T * H * 576 * 2 + T * H * 512 * 2
    return byt, n_used


def diag(device, reps: int) -> dict:
    """Where the small-T time goes (headline shape B=1, L=32k, n=4, H=8): an empty graph (the
    replay-timing overhead), then per variant (tile config x split count x combine path, bf16 and
    fp8) the per-replay event time and the CUPTI kernel span / per-kernel sum (Timer)."""
    import torch

    from dsa_verify.api import dsa_verify_fwd, resolve_full, workspace_numel_for
    from dsa_verify.layout import quantize_cache

    spec = DsaCase("diag", (32768,), 4, 8, seed=3, poison=False)
    d = make_inputs(spec, device)
    q, kv, pt, sl = d["q_all"], d["kv_cache"], d["page_table_1"], d["seq_lens"]
    timer = Timer(device)
    res = {}
    x = torch.zeros(1, device=device)
    res["empty_graph_replay_s"] = timer.time(lambda: x.add_(1), reps)
    out = torch.empty(4, 8, 512, dtype=torch.bfloat16, device=device)
    caches = {"bf16": kv, "fp8": quantize_cache(kv)}
    variants = [("auto", None, "auto"), ("m16", 32, "kernel"), ("m16", 16, "cluster")]
    variants += [("m16w", 32, "kernel"), ("n8", 32, "kernel"), ("n8", 16, "kernel"), ("n8s", 64, "kernel")]
    variants += [("n8s", 32, "kernel"), ("m16", 64, "kernel")]
    graphs, fns, keep = {}, {}, []
    for kvname, cache in caches.items():
        for cfg, S, comb in variants:
            lab = f"{kvname}_{cfg}_S{S or 'auto'}_{comb}"
            try:
                ws = torch.empty(
                    max(1, workspace_numel_for(q, cache, pt, cfg, S, comb)), dtype=torch.float32, device=device
                )
                keep.append(ws)
                fn = lambda c=cache, cfg=cfg, S=S, comb=comb, ws=ws: dsa_verify_fwd(  # noqa: E731
                    q, c, pt, sl, SM_SCALE, out=out, workspace=ws, num_splits=S, tile_config=cfg, combine=comb
                )
                _, tc, s_run, _, _, cl = resolve_full(device, 8, 2048, 4, kvname == "fp8", cfg, S, comb)
                fns[lab] = fn
                graphs[lab] = g = timer.graph(fn)
                res[lab] = {"plan": f"{tc.name} S={s_run} cluster={cl}", "replay_s": timer.time(fn, reps, g)}
            except Exception as exc:
                res[lab] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    for lab, sp in timer.kernel_spans(graphs, reps, fns).items():
        res[lab].update(sp)
    return res


def _timeline(words, n_split: int, n_comb: int) -> dict:
    """Phase times (µs) of one traced call from its per-CTA words (see csrc DSAV_TRACE). Times are
    taken relative to the first split CTA's entry in int64 before any float conversion (the timer
    counts ns since an epoch: ~1e18, beyond a double's exact range)."""
    import torch

    w = words.view(-1, 8)[: n_split + n_comb].long()
    sp, cb = w[:n_split], w[n_split:]
    t0 = sp[:, 0].min()
    spt = (sp[:, :5] - t0).double() * 1e-3
    cbt = (cb[:, :3] - t0).double() * 1e-3
    live = sp[:, 1] > 0  # CTAs that ran the prologue (not an early exit)

    def med_max(x):
        return (float(x.median()), float(x.max())) if x.numel() else (None, None)

    out = {"ctas": n_split, "entry_spread_us": float(spt[:, 0].max())}
    for name, a, b in (("index", 0, 1), ("first_tile", 1, 2), ("compute", 2, 3), ("store", 3, 4)):
        out[f"{name}_med_us"], out[f"{name}_max_us"] = med_max(spt[live, b] - spt[live, a])
    out["split_end_us"] = float(spt[:, 4].max())
    sm = sp[:, 5]
    out["sms_used"] = int(torch.unique(sm).numel())
    out["max_ctas_per_sm"] = int(torch.bincount(sm).max()) if sm.numel() else 0
    if n_comb:
        out["combine_entry_us"] = float(cbt[:, 0].min())
        out["combine_release_after_split_end_us"] = float(cbt[:, 1].min() - spt[:, 4].max())
        out["combine_end_us"] = float(cbt[:, 2].max())
    return out


def trace(device, reps: int) -> dict:
    """Per-CTA timeline of the headline shape (B=1, L=32k, n=4, H=8) from the diagnostic DSAV_TRACE
    build: thread 0 of each CTA stamps %globaltimer at entry, after its prologue issue (index words
    in), first tile visible, all tiles computed, end; the combine CTAs at entry, griddepcontrol.wait
    release, end. Direct calls after an L2 flush; per field the median over reps calls. The
    timer's update granularity is the GPU's (coarse on some parts): read medians over many CTAs."""
    import statistics as st

    import torch

    from dsa_verify.api import combine_wide, dsa_verify_fwd, resolve_full, trace_numel, workspace_numel_for
    from dsa_verify.layout import quantize_cache

    spec = DsaCase("trace", (32768,), 4, 8, seed=3, poison=False)
    d = make_inputs(spec, device)
    q, kv, pt, sl = d["q_all"], d["kv_cache"], d["page_table_1"], d["seq_lens"]
    timer = Timer(device)
    out = torch.empty(4, 8, 512, dtype=torch.bfloat16, device=device)
    caches = {"bf16": kv, "fp8": quantize_cache(kv)}
    res = {}
    variants = [("auto", None), ("m16", 32), ("n8", 32), ("n8", 16), ("n8", 8), ("n8s", 64), ("n8x", 32), ("n8x", 16)]
    variants += [("n8x8", 16), ("n8xr", 32), ("n8xr", 16)]
    for kvname, cache in caches.items():
        for cfg, S in variants:
            if not tiles.has_kernel(cfg, kvname == "fp8"):
                continue  # n8x: no fp8 kernel; n8xr: no bf16 kernel
            lab = f"{kvname}_{cfg}_S{S or 'auto'}"
            try:
                _, tc, s_run, _, _, cl = resolve_full(device, 8, 2048, 4, kvname == "fp8", cfg, S)
                n_tr = trace_numel(4, 8, s_run, tc, cl, combine_wide(4, 8))
                n_split = 4 * s_run * -(-8 // tc.block_m)
                tr = torch.zeros(n_tr, dtype=torch.int64, device=device)
                ws = torch.empty(max(1, workspace_numel_for(q, cache, pt, cfg, S)), dtype=torch.float32, device=device)
                for _ in range(2):
                    dsa_verify_fwd(
                        q, cache, pt, sl, SM_SCALE, out=out, workspace=ws, num_splits=S, tile_config=cfg, trace=tr
                    )
                samples = []
                for _ in range(reps):
                    timer.flush()
                    tr.zero_()
                    dsa_verify_fwd(
                        q, cache, pt, sl, SM_SCALE, out=out, workspace=ws, num_splits=S, tile_config=cfg, trace=tr
                    )
                    torch.cuda.synchronize()
                    samples.append(_timeline(tr.cpu(), n_split, n_tr // 8 - n_split))
                keys = samples[0].keys()
                res[lab] = {"plan": f"{tc.name} S={s_run} cluster={cl}"}
                for k in keys:
                    vals = [x[k] for x in samples if x[k] is not None]
                    res[lab][k] = st.median(vals) if vals else None
            except Exception as exc:
                res[lab] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    return res


def combine_label(S: int, cluster: int, wide: bool) -> str:
    """How a plan's splits merge: none (S = 1), clusterN (DSMEM), or the wide / sliced combine kernel."""
    if S <= 1:
        return "none"
    return f"cluster{cluster}" if cluster else ("wide" if wide else "sliced")


W64_PHASES = ("wait_barrier", "s", "softmax_pv_issue", "store_pv_wait")


def phase_sums(packed: int) -> dict:
    """w64's timeline word 7 (csrc W64_PHASE): four 16-bit fields, SM cycles / 16 summed over the CTA's
    tiles, field k at bits 16k -> {phase name: cycles}."""
    return {name: ((packed >> (16 * k)) & 0xFFFF) * 16 for k, name in enumerate(W64_PHASES)}


def sm_schedule(w) -> dict:
    """How the split CTAs of one traced call followed each other on the SMs (µs), from their
    timeline words [n, 8] int64 (word 0 entry, 3 all tiles computed, 4 end, 5 SM id; the CTAs that
    ran their tiles): `sm_gap_us_med` / `_max`, from a CTA's end to the entry of the next CTA on its
    SM (the launch gap a persistent kernel would remove), `epilogue_us_med` (word 4 - word 3),
    `ctas_per_sm_max`, `last_entry_us` (the latest entry after the first). The gaps are None when
    no SM ran two CTAs."""
    import torch

    t0 = w[:, 0].min()
    gaps = []
    per_sm: dict[int, list] = {}
    for row in w.tolist():
        per_sm.setdefault(int(row[5]), []).append(row)
    for rows in per_sm.values():
        rows.sort(key=lambda r: r[0])
        gaps += [(b[0] - a[4]) * 1e-3 for a, b in zip(rows, rows[1:])]
    g = torch.tensor(gaps, dtype=torch.float64)
    return {
        "sm_gap_us_med": float(g.median()) if len(gaps) else None,
        "sm_gap_us_max": float(g.max()) if len(gaps) else None,
        "epilogue_us_med": float(((w[:, 4] - w[:, 3]).double() * 1e-3).median()),
        "ctas_per_sm_max": max(len(r) for r in per_sm.values()),
        "last_entry_us": float((w[:, 0].max() - t0).double() * 1e-3),
    }


def phase_row(words, n_split: int) -> dict:
    """One traced call of w64, from its timeline words [n, 8] int64 (the n_split split CTAs first, then the
    combine CTAs; word 0 entry, 1 loop start, 2 first tile, 3 all tiles computed, 4 end (ns), 5 SM id, 6 tiles,
    7 the packed phase cycles): over the CTAs that ran tiles, the medians of tiles, loop µs (and per tile),
    prologue µs (entry to the first tile: setup, entry to the loop's start, plus first_wait, the first
    tile's wait and barrier), each phase's SM cycles per tile, the split grid's end and the combine's end
    (µs after the first entry), and sm_schedule's columns."""
    import torch

    w, cw = words[:n_split], words[n_split:]
    w = w[w[:, 6] > 0]
    nt = w[:, 6].double()
    t0 = w[:, 0].min()
    row = {
        "ctas": len(w),
        "tiles_med": float(nt.median()),
        "loop_us_med": float(((w[:, 3] - w[:, 2]).double() * 1e-3).median()),
        "loop_us_per_tile_med": float(((w[:, 3] - w[:, 2]).double() * 1e-3 / nt).median()),
        "prologue_us_med": float(((w[:, 2] - w[:, 0]).double() * 1e-3).median()),
        "setup_us_med": float(((w[:, 1] - w[:, 0]).double() * 1e-3).median()),
        "first_wait_us_med": float(((w[:, 2] - w[:, 1]).double() * 1e-3).median()),
        "split_end_us": float(((w[:, 4] - t0).double() * 1e-3).max()),
    }
    row.update(sm_schedule(w))
    if len(cw):  # the combine CTAs' end stamps (word 2)
        row["combine_end_us"] = float(((cw[:, 2] - t0).double() * 1e-3).max())
    ph = [phase_sums(int(x)) for x in w[:, 7].tolist()]
    for name in W64_PHASES:
        per_tile = torch.tensor([p[name] for p in ph], dtype=torch.float64) / nt
        row[f"{name}_cycles_per_tile_med"] = float(per_tile.median())
    return row


def trace_phases(device, reps: int, shapes, splits, configs=("w64",), kvs=("bf16", "fp8")) -> dict:
    """Per-tile loop phases of w64 or its variants (`configs`: w64 and the tiles.EXPERIMENTAL_CONFIGS of
    kind "wg"; DSAV_TRACE build) for each shape, cache (`kvs`) and split count (None: the auto plan's):
    phase_row of every call, each field the median over `reps` calls after an L2 flush."""
    import itertools

    import torch

    from dsa_verify.api import combine_wide, dsa_verify_fwd, resolve_full, trace_numel, workspace_numel_for
    from dsa_verify.layout import quantize_cache

    timer = Timer(device)
    res: dict = {}
    for B, L, n, H in shapes:
        spec = DsaCase(f"b{B}_L{L}_n{n}_h{H}", (L,) * B, n, H, seed=B * 7 + n, poison=False)
        d = make_inputs(spec, device)
        q, kv, pt, sl = d["q_all"], d["kv_cache"], d["page_table_1"], d["seq_lens"]
        T = q.shape[0]
        out = torch.empty(T, H, 512, dtype=torch.bfloat16, device=device)
        caches = {"bf16": kv, "fp8": quantize_cache(kv)}
        for kvname, cfg, S in itertools.product([k for k in caches if k in kvs], configs, splits):
            lab = f"B{B}_L{L}_n{n}_H{H}_{kvname}_{cfg}_S{S or 'auto'}"
            cache = caches[kvname]
            try:
                _, tc, s_run, _, _, cl = resolve_full(device, H, 2048, T, kvname == "fp8", cfg, S)
                n_split = T * s_run * -(-H // tc.block_m)
                wide = combine_wide(T, H)
                tr = torch.zeros(trace_numel(T, H, s_run, tc, cl, wide), dtype=torch.int64, device=device)
                ws_n = max(1, workspace_numel_for(q, cache, pt, cfg, S))
                kw = {
                    "out": out,
                    "workspace": torch.empty(ws_n, dtype=torch.float32, device=device),
                    "num_splits": S,
                    "tile_config": cfg,
                    "trace": tr,
                }
                dsa_verify_fwd(q, cache, pt, sl, SM_SCALE, **kw)
                samples = []
                for _ in range(reps):
                    timer.flush()
                    tr.zero_()
                    dsa_verify_fwd(q, cache, pt, sl, SM_SCALE, **kw)
                    torch.cuda.synchronize()
                    samples.append(phase_row(tr.cpu().view(-1, 8).long(), n_split))
                res[lab] = {"plan": f"{tc.name} S={s_run} combine={combine_label(s_run, cl, wide)}"}
                for k in samples[0]:
                    vals = [x[k] for x in samples if x[k] is not None]
                    res[lab][k] = statistics.median(vals) if vals else None
            except Exception as exc:
                res[lab] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m verify_tools.dsa_bench", description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--quick", action="store_true", help="headline shapes only")
    ap.add_argument("--shapes", default="", help="only these shapes, B:L:n:H comma-separated (e.g. 2:32768:8:8)")
    ap.add_argument("--budget-s", type=float, default=1e9, help="stop the grid after this many seconds")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--out", default="", help="also write the JSON document to this file")
    ap.add_argument("--diag", action="store_true", help="small-T time breakdown only")
    ap.add_argument("--trace", action="store_true", help="per-CTA timeline of the headline shape (DSAV_TRACE build)")
    ap.add_argument(
        "--trace-phases",
        action="store_true",
        help="w64's loop phases per tile for --shapes (DSAV_TRACE build), at the auto split count and --alt-splits",
    )
    ap.add_argument(
        "--trace-configs",
        default="w64",
        help="--trace-phases of these configs, comma-separated (e.g. w64, or w64 and an experimental variant)",
    )
    ap.add_argument("--trace-kv", default="bf16,fp8", help="--trace-phases of these caches (bf16, fp8)")
    ap.add_argument("--no-sglang", action="store_true", help="skip SGLang's DSA Triton peer")
    ap.add_argument("--no-flashmla", action="store_true", help="skip FlashMLA's sparse peer")
    ap.add_argument(
        "--alt-config", default="", help="also time ours with this tile config (its own split plan), same run: A/B"
    )
    ap.add_argument(
        "--alt-splits", type=int, default=None, help="--alt-config with this split count instead of its own plan"
    )
    ap.add_argument(
        "--alt-combine",
        default="auto",
        choices=("auto", "sliced", "wide"),
        help="--alt-config (default: auto) with this combine kernel for split plans",
    )
    ap.add_argument(
        "--sm120-occupancy",
        action="store_true",
        help="run ours as an sm_120 SM would hold it (smem padded to its CTAs per SM; sm_120a's config rules)",
    )
    a = ap.parse_args(argv)
    try:
        shapes = parse_shapes(a.shapes) if a.shapes else grid(a.quick)
    except ValueError as exc:
        print(f"--shapes: {exc}", file=sys.stderr)
        return 2
    try:
        import torch
    except Exception as exc:
        return _emit(blocked_doc(f"torch not importable: {exc}"), a, EXIT_BLOCKED)
    if not torch.cuda.is_available():
        return _emit(blocked_doc(f"no CUDA device on host {socket.gethostname()}"), a, EXIT_BLOCKED)
    from dsa_verify.api import (
        combine_wide,
        device_info,
        dsa_verify_fwd,
        emulate_sm120_occupancy,
        resolve_full,
        workspace_numel_for,
    )
    from dsa_verify.layout import quantize_cache
    from verify_tools.dsa_parity import sglang_triton

    device = torch.device("cuda", torch.cuda.current_device())
    arch, sms = device_info(device)
    if a.sm120_occupancy:
        try:
            emulate_sm120_occupancy(device)
        except ValueError as exc:
            return _emit(blocked_doc(f"--sm120-occupancy: {exc}"), a, EXIT_BLOCKED)
    if a.diag:
        print(json.dumps(diag(device, a.reps), indent=1))
        return 0
    if a.trace:
        print(json.dumps(trace(device, a.reps), indent=1))
        return 0
    if a.trace_phases:
        splits = [None] + ([a.alt_splits] if a.alt_splits else [])
        cfgs = tuple(c for c in a.trace_configs.split(",") if c)
        kvs = tuple(k for k in a.trace_kv.split(",") if k)
        print(json.dumps(trace_phases(device, a.reps, shapes, splits, cfgs, kvs), indent=1))
        return 0
    alt_config = a.alt_config or ("auto" if a.alt_combine != "auto" else "")
    t_start = time.time()
    ceil = measure_ceilings(device)
    bw, fl = ceil["copy_bytes_per_s"], ceil["bf16_matmul_flops_per_s"]
    timer = Timer(device)
    peer, peer_reason = (None, "--no-sglang given") if a.no_sglang else sglang_triton()
    if a.no_flashmla:
        fm, fm_reason = None, "--no-flashmla given"
    else:
        from verify_tools.bench import import_flashmla

        fm, fm_reason = import_flashmla(FLASHMLA_SPARSE_ARCHS, "FlashMLA's legacy sparse kernels")
    fm_ran = False
    rows, left_out, failures = [], [], 0
    for B, L, n, H in shapes:
        if time.time() - t_start > a.budget_s:
            left_out.append({"B": B, "L": L, "n": n, "H": H})
            continue
        t_shape = time.time()
        spec = DsaCase(f"b{B}_L{L}_n{n}_h{H}", (L,) * B, n, H, seed=B * 7 + n, poison=False)
        d = make_inputs(spec, device)
        d["n"] = n
        ov = topk_overlap(d["page_table_1"].cpu(), d["seq_lens"].cpu(), n)
        q, pt, sl = d["q_all"], d["page_table_1"], d["seq_lens"]
        caches = {"bf16": d["kv_cache"]}
        caches["fp8"] = quantize_cache(d["kv_cache"])
        T = q.shape[0]
        per_kv, graphs, fns, keep = {}, {}, {}, []
        for kvname, kv in caches.items():
            row_bytes = 1152 if kvname == "bf16" else 656
            byt, n_used = shape_bytes(d, H, row_bytes, shared=False)
            byt_sh, _ = shape_bytes(d, H, row_bytes, shared=True)
            flops = 2 * H * n_used * (576 + 512)
            floor = max(byt / bw, flops / fl)
            floor_sh = max(byt_sh / bw, flops / fl)
            out = torch.empty(T, H, 512, dtype=torch.bfloat16, device=device)
            ws = torch.empty(max(1, workspace_numel_for(q, kv, pt)), dtype=torch.float32, device=device)
            keep += [out, ws]
            _, cfg, S, chunk, _, cluster = resolve_full(device, H, TOPK, T, kvname == "fp8")
            row = {
                "B": B,
                "L": L,
                "n": n,
                "T": T,
                "H": H,
                "kv": kvname,
                "config": cfg.name,
                "splits": S,
                "combine": combine_label(S, cluster, combine_wide(T, H)),
                "floor_s": floor,
                "floor_bound": "bytes" if byt / bw >= flops / fl else "flops",
                "floor_shared_s": floor_sh,
                "overlap": ov,
            }
            fn = lambda q=q, kv=kv, pt=pt, sl=sl, out=out, ws=ws: dsa_verify_fwd(  # noqa: E731
                q, kv, pt, sl, SM_SCALE, out=out, workspace=ws
            )
            try:
                fns[("ours", kvname)] = fn
                graphs[("ours", kvname)] = g = timer.graph(fn)
                row["ours_replay_s"] = timer.time(fn, a.reps, g)
            except Exception as exc:
                row["ours_error"] = f"{type(exc).__name__}: {exc}"[:300]
                failures += 1
            if alt_config and not tiles.has_kernel(alt_config, kvname == "fp8"):  # the row says so
                row["alt"] = {"config": alt_config, "skipped": f"no {kvname} kernel"}
            elif alt_config:
                try:
                    _, acfg, aS, _, _, acl = resolve_full(device, H, TOPK, T, kvname == "fp8", alt_config, a.alt_splits)
                    aws = torch.empty(
                        max(1, workspace_numel_for(q, kv, pt, alt_config, a.alt_splits)),
                        dtype=torch.float32,
                        device=device,
                    )
                    aout = torch.empty_like(out)
                    keep += [aws, aout]
                    akw = {"tile_config": alt_config, "num_splits": a.alt_splits, "combine": a.alt_combine}
                    afn = lambda q=q, kv=kv, pt=pt, sl=sl, o=aout, w=aws, kw=akw: dsa_verify_fwd(  # noqa: E731
                        q, kv, pt, sl, SM_SCALE, out=o, workspace=w, **kw
                    )
                    alabel = combine_label(aS, acl, combine_wide(T, H, a.alt_combine))
                    row["alt"] = {"config": acfg.name, "splits": aS, "combine": alabel}
                    fns[("alt", kvname)] = afn
                    graphs[("alt", kvname)] = g = timer.graph(afn)
                    row["alt"]["replay_s"] = timer.time(afn, a.reps, g)
                    if "ours_replay_s" in row:
                        row["alt"]["max_abs_diff_vs_ours"] = float((aout.float() - out.float()).abs().max())
                except Exception as exc:
                    row["alt"] = {"config": alt_config, "error": f"{type(exc).__name__}: {exc}"[:300]}
                    fns.pop(("alt", kvname), None)
                    graphs.pop(("alt", kvname), None)
            if kvname == "bf16":
                if peer is None:
                    row["sglang_triton"] = {"skipped": peer_reason}
                else:
                    pfn = lambda q=q, kv=kv, pt=pt: peer(q, kv, pt, SM_SCALE)  # noqa: E731
                    try:
                        fns[("peer", kvname)] = pfn
                        graphs[("peer", kvname)] = g = timer.graph(pfn)
                        row["sglang_triton"] = {"replay_s": timer.time(pfn, a.reps, g)}
                    except Exception as exc:
                        row["sglang_triton"] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
            else:
                row["sglang_triton"] = {"skipped": "cannot read SGLang's 656-byte fp8 rows (raw e4m3 only)"}
            if fm is None:
                row["flashmla"] = {"skipped": fm_reason}
            else:  # see FLASHMLA_ENTRY for what SGLang calls (ran on the H200: DSA run 10)
                row["flashmla"] = {"entry": FLASHMLA_ENTRY[kvname], "q_heads": flashmla_heads(H)}
                try:
                    fargs = flashmla_args(q, kv, pt, sl, kvname)
                    ffn = flashmla_fn(fm, fargs, SM_SCALE)
                    fo = flashmla_out(ffn(), H).float()
                    if "ours_replay_s" in row:  # `out` holds our output (the graph's warm-up calls)
                        err = float((out.float() - fo).norm() / fo.norm())
                        row["flashmla"]["rel_err_vs_ours"] = err
                        if not err <= FLASHMLA_AGREE:
                            row["flashmla"]["disagrees"] = f"rel err vs ours {err:.2e} > {FLASHMLA_AGREE}"
                    keep.append(fargs)
                    fns[("flashmla", kvname)] = ffn
                    graphs[("flashmla", kvname)] = g = timer.graph(ffn)
                    row["flashmla"]["replay_s"] = timer.time(ffn, a.reps, g)
                    fm_ran = True
                except Exception as exc:  # recorded as the skip reason, never fails the run
                    row["flashmla"]["skipped"] = f"{type(exc).__name__}: {exc}"[:300]
                    fns.pop(("flashmla", kvname), None)
                    graphs.pop(("flashmla", kvname), None)
            row["fa3"] = {"skipped": "flash-attn 3 not installed on this host"}
            per_kv[kvname] = row
            rows.append(row)
        t_graphs = time.time()
        try:
            spans = timer.kernel_spans(graphs, a.reps, fns)
        except Exception as exc:
            spans = {k: {"error": f"{type(exc).__name__}: {exc}"[:300]} for k in graphs}
        for (who, kvname), sp in spans.items():
            row = per_kv[kvname]
            floor, floor_sh = row["floor_s"], row["floor_shared_s"]
            if who == "ours":
                row["ours_cupti"] = sp
                if "s" in sp:
                    row["ours_s"] = sp["s"]
                    row["sol"] = floor / sp["s"]
                    row["sol_shared"] = floor_sh / sp["s"]
                else:
                    failures += 1
            elif who == "alt":
                row["alt"].update(sp)
                if "s" in sp:
                    row["alt"]["sol"] = floor / sp["s"]
            else:
                key = "sglang_triton" if who == "peer" else "flashmla"
                row[key].update(sp)
                if "s" in sp:
                    row[key]["sol"] = floor / sp["s"]
        for row in per_kv.values():
            st = row.get("sglang_triton", {})
            if "ours_s" in row and "s" in st:
                row["speedup_vs_sglang_triton"] = st["s"] / row["ours_s"]
            if "ours_replay_s" in row and "replay_s" in st:
                row["speedup_vs_sglang_triton_replay"] = st["replay_s"] / row["ours_replay_s"]
            fmr = row.get("flashmla", {})
            if "ours_s" in row and "s" in fmr:
                row["speedup_vs_flashmla"] = fmr["s"] / row["ours_s"]
            alt = row.get("alt", {})
            if "ours_s" in row and "s" in alt:
                alt["time_over_auto"] = alt["s"] / row["ours_s"]
            if "s" in alt and "s" in st:
                alt["speedup_vs_sglang_triton"] = st["s"] / alt["s"]
        graphs = fns = keep = None
        if "ours_s" in per_kv.get("fp8", {}) and "ours_s" in per_kv.get("bf16", {}):
            per_kv["fp8"]["fp8_over_bf16_time"] = per_kv["fp8"]["ours_s"] / per_kv["bf16"]["ours_s"]
        if "ours_replay_s" in per_kv.get("fp8", {}) and "ours_replay_s" in per_kv.get("bf16", {}):
            per_kv["fp8"]["fp8_over_bf16_replay_time"] = (
                per_kv["fp8"]["ours_replay_s"] / per_kv["bf16"]["ours_replay_s"]
            )
        for r in per_kv.values():
            peers = {"ours": r.get("ours_s")}
            if isinstance(r.get("sglang_triton"), dict) and "s" in r["sglang_triton"]:
                peers["sglang_triton"] = r["sglang_triton"]["s"]
            fmr = r.get("flashmla", {})
            if "s" in fmr and "disagrees" not in fmr:
                peers["flashmla"] = fmr["s"]
            if r["kv"] == "fp8" and "ours_s" in per_kv["bf16"]:
                peers["ours_bf16"] = per_kv["bf16"]["ours_s"]
            live = {k: v for k, v in peers.items() if v}
            r["fastest"] = min(live, key=live.get) if live else None
        d = caches = q = pt = sl = None
        torch.cuda.empty_cache()
        print(
            f"[{time.time() - t_start:6.1f}s] B={B} L={L} n={n} H={H}: {time.time() - t_shape:.1f}s "
            f"(inputs + graphs + replay timing {t_graphs - t_shape:.1f}s, CUPTI {time.time() - t_graphs:.1f}s)",
            file=sys.stderr,
            flush=True,
        )
        if a.out:  # partial document after every shape: a timed-out run still leaves its rows
            with open(a.out, "w") as f:
                json.dump(
                    {"ok": None, "partial": True, "ceilings": ceil, "rows": rows, "summary": summarize(rows)},
                    f,
                    indent=1,
                )
    doc = {
        "ok": failures == 0 and bool(rows),
        "host": socket.gethostname(),
        "device": torch.cuda.get_device_name(device),
        "arch": arch,
        "sms": sms,
        "sm120_occupancy": a.sm120_occupancy,
        "ceilings": ceil,
        "sglang_triton": "ran" if peer else peer_reason,
        "flashmla": "ran" if fm_ran else fm_reason or "did not run on any row (see rows[].flashmla.skipped)",
        "timing": (
            f"per CUDA-graph replay after an L2 flush, median of {a.reps}: *_s / sol / speedup_* = CUPTI kernel "
            "span (first kernel start to last kernel end of the call, torch.profiler); *_replay_s = CUDA events "
            "around the replay (the old number, with the replay's launch and event overhead)"
        ),
        "rows": rows,
        "left_out": left_out,
        "seconds": round(time.time() - t_start, 1),
        "summary": summarize(rows),
    }
    return _emit(doc, a, 0 if doc["ok"] else 1)


def _emit(doc: dict, a, code: int) -> int:
    text = json.dumps(doc, indent=1)
    if getattr(a, "out", ""):
        with open(a.out, "w") as f:
            f.write(text)
    return emit(doc, a.json, code, human=_print_rows)


def _print_rows(doc: dict) -> None:
    nan = float("nan")
    for r in doc.get("rows", []):
        st = r.get("sglang_triton", {})
        print(
            f"B={r['B']:<2} L={r['L']:<6} n={r['n']} H={r['H']:<2} {r['kv']:<4} {r['config']:<4} S={r['splits']:<3} "
            f"{r.get('combine', ''):<9} ours/floor={r.get('ours_s', nan) / r['floor_s']:.2f} "
            f"(replay {r.get('ours_replay_s', nan) / r['floor_s']:.2f}) "
            f"vs_triton={r.get('speedup_vs_sglang_triton', nan):.2f}x "
            f"(replay {r.get('speedup_vs_sglang_triton_replay', nan):.2f}x) "
            f"triton/floor={st.get('s', nan) / r['floor_s']:.2f} "
            f"fp8/bf16={r.get('fp8_over_bf16_time', nan):.2f} "
            f"uniq={r['overlap']['unique_fraction_mean'] or nan:.2f}" + _peer_columns(r)
        )
    print(f"left out: {len(doc.get('left_out', []))}")


def _peer_columns(r: dict) -> str:
    """The --alt-config and FlashMLA columns of a row, where the run has them."""
    nan, out = float("nan"), ""
    alt = r.get("alt")
    if alt:
        out += (
            f" alt={alt.get('config')} S={alt.get('splits')} {alt.get('combine', '')} alt/auto={alt.get('time_over_auto', nan):.3f} "
            f"alt_diff={alt.get('max_abs_diff_vs_ours')} {alt.get('error', '')}"
        )
    fm = r.get("flashmla", {})
    if "s" in fm:
        out += f" flashmla/ours={fm['s'] / r.get('ours_s', nan):.2f} err_vs_ours={fm.get('rel_err_vs_ours')}"
    elif fm.get("skipped"):
        out += f" flashmla skipped: {str(fm['skipped'])[:120]}"
    return out + f" fastest={r.get('fastest')}"


if __name__ == "__main__":
    sys.exit(main())
