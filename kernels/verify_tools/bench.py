"""Microbenchmark (phase 2): bundled MLA verify kernel vs the oracle, SGLang's Triton kernels and
the roofline floor, all measured in one run.

Usage: python -m verify_tools.bench [--json] [--plot FILE.png] [--quick] [--shapes B:L:n:H,...]
       python -m verify_tools.bench --ab-summary AB.json   (the lines of a --tree-ab document; no device)

Timing: every kernel (ours, the oracle, SGLang's) is captured into a CUDA graph and the replay
is timed with CUDA events (host launch overhead excluded for all alike; a kernel whose capture
fails is timed eagerly and the row says so); median of ITERS runs after WARMUP runs; before
every timed run a buffer of 4x the L2 size is overwritten and then its first half (2x L2) is
read back, so the KV cache comes from HBM and no dirty flush lines are written back inside the
timed region.
`new_eager_us` also reports our kernel called eagerly from Python (validation + launch). Ceilings
measured at the start of the run: copy bandwidth (device-to-device copy of 2 GiB, bytes read +
written / time) and bf16 matmul rate (8192^3). Floor per shape = max(bytes / copy BW,
FLOPs / matmul rate) with bytes = sum_b [L_b*(1152 + 8) + n_b*1152 + n_b*H*(576+512)*2] (KV rows,
int64 slot ids, draft rows, q and o) and FLOPs = sum_b 2*H*n_b*(L_b+n_b)*(576+512).
SOL% = floor / time. Speedups are time ratios from the same run. `new_us` is the arch's default
tile config; `configs_us` times every other config built for the arch on the same inputs. Shapes use chain drafts
(topk = 1) so SGLang's verify_shared_kv_fwd (chain only) applies; the mask is the FULL layout.

Draft trees (TREE_SHAPES): the same shape with a random topk > 1 tree instead of the chain, both timed in
alternation in the same run: `tree_us`, `tree_over_chain` (summary: `max_tree_over_chain`).

fp8 cache (FP8_SHAPES, or every shape with --fp8): the same shape with the cache stored as
SGLang's fp8_e4m3 MLA pool (float8_e4m3fn rows, per-tensor k_scale / v_scale, bf16 drafts), timed
in the same run: `fp8_us`, `fp8_over_bf16` = fp8_us / new_us, its own floor (KV rows of 576 + 8
bytes) and its error vs the fp32 oracle on the dequantized values; `fp8_graph_gate_us` the same replay
captured with the opt-in fp8_graph_gate (the device picks the kernel per replay).

Graph-buffer mode (run by default with the built-in shape list, or with --graph-buffer): the way
SGLang's CUDA-graph path drives the kernel. kv_indices is a fixed buffer of max_bs * num_draft *
context_len int64 (TritonAttnBackend.cuda_graph_kv_indices), the FULL mask buffer and kv_indptr /
mask_indptr are fixed too, and the launch (grid, workspace) is sized at capture from the buffer
sizes; the kernel derives the split count it runs from kv_indptr on the device (the exact-length
rule, capped at the capture's), so each replay should equal the exact-length call bit for bit
(`replay_equal_exact_bitwise`; `splits_graph_buffer` / `splits_effective` / `splits_exact`). One graph is captured, then for each real prefix length (GRAPH_BUFFER_LENS) the buffers are
rewritten in place and the replay is timed; `ratio` = replay time / the exact-length call's time
(graph captured on exact-size tensors), both in this run, each the minimum of GB_ROUNDS medians
taken in alternation (`rounds`; a single pair of 10-replay medians moved by 1-2% between runs).
Phase 2 gates the worst ratio.
Peers, same inputs, same run, each skipped with its reason in the row: SGLang extend_attention_fwd
and verify_shared_kv_fwd (sglang importable), FlashInfer's BatchMLAPagedAttentionWrapper with the
fa2 and fa3 backends (flashinfer importable; page_size 1, causal, the drafts' KV appended to each
request's pages), FlashMLA's dense decode (flash_mla importable from the sgl-flash-mla 1.0.0 wheel,
sm_90 only: legacy SM90 kernel, a page-64 copy of the same context + draft KV, causal among the
drafts; first run on the H200 in session 8). `fastest_peer` / `speedup_vs_fastest_peer`
name the fastest one that ran (and agreed with ours) and our speedup over it (> 1: we are faster).
Development A/B (`--tree-ab NAME=CSRC_DIR,...`, not a phase step): other copies of mla_verify's csrc/
(an older commit's, a diagnostic build) JIT-built beside this checkout's ("cur") and timed in one
process, interleaved; `--ab-configs` names the tile configs each tree runs (variants "tree/config"),
`--shapes` replaces AB_SHAPES, `--ab-gb-trees` picks the trees that get graph-buffer rows.
Exit 0 ok, 1 a kernel failed or disagreed with the oracle, 75 no CUDA device.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import math
import re
import socket
import statistics
import sys

from mla_verify.inputs import CaseSpec, kernel_args, kernel_kwargs, make_inputs
from tool_contract import EXIT_BLOCKED
from tool_contract import blocked_doc as tool_blocked_doc
from tool_contract import emit as emit_doc

WARMUP, ITERS = 3, 10
SANITY_REL_ERR = 1e-2  # new kernel vs oracle / SGLang per shape (parity has the tight bound)

SWEEP = [(1, L, 8, 16) for L in (4096, 8192, 16384, 32768, 65536, 131072)]
ANCHORS = [(8, 32768, 8, 16), (32, 8192, 8, 16), (4, 65536, 4, 64)]
EXTRA = [(1, 32768, 16, 16), (1, 32768, 4, 128), (4, 32768, 8, 128), (32, 32768, 8, 16), (4, 131072, 4, 16)]
QUICK = [(1, 4096, 8, 16), (1, 32768, 8, 16), (4, 65536, 4, 64)]
FP8_SHAPES = [(4, 131072, 4, 16), (1, 32768, 8, 16), (8, 32768, 8, 16), (32, 8192, 8, 16)]
FP8_MEM_SHAPE = (4, 131072, 4, 16)  # memory-floored (R = 64): the fp8 time must show the halved bytes
GRAPH_BUFFER_LENS = (512, 4096, 32768, 131072)
GB_ROUNDS = 3  # graph-buffer mode: medians per side, taken in alternation; each side's minimum counts
GRAPH_BUFFER_SHAPES = [(1, 8, 16), (4, 4, 16), (8, 8, 16)]  # (max_bs, num_draft, H)
FP8_K_SCALE = 0.5  # per-tensor scale of the fp8 bench cache (k / k_scale is stored)
# Shapes also timed with a random draft tree (topk > 1) in place of the chain (bench_tree); issue 13: within 5%.
TREE_SHAPES = [(1, 4096, 8, 16), (1, 32768, 8, 16), (8, 32768, 8, 16), (32, 8192, 8, 16)]
TREE_ROUNDS = 3  # chain and tree medians taken in alternation; each side's minimum counts


def fp8_case(spec):
    """spec with the bench's fp8 cache: e4m3fn rows, k_scale = v_scale = FP8_K_SCALE."""
    return dataclasses.replace(spec, kv_dtype="fp8", k_scale=FP8_K_SCALE, v_scale=FP8_K_SCALE)


def ab_case(B, L, n, H, kv="bf16"):
    """The synthetic chain inputs of one tree_ab shape (also tests/device/dense_ncu.py's): seed L + B, no
    poison, kv "bf16" or "fp8" (fp8_case)."""
    spec = CaseSpec("d", (L,) * B, (n,) * B, H, tree="chain", poison=False, seed=L + B)
    return fp8_case(spec) if kv == "fp8" else spec


def shape_bytes_flops(B, L, n, H, kv_bytes_per_dim=2):
    by = B * (L * (576 * kv_bytes_per_dim + 8) + n * 1152 + n * H * (576 + 512) * 2)
    fl = B * 2 * H * n * (L + n) * (576 + 512)
    return by, fl


def import_sglang():
    """(extend_attention_fwd, verify_shared_kv_fwd, None) or (None, None, reason)."""
    try:
        from sglang.kernels.ops.attention.extend_attention import extend_attention_fwd
        from sglang.kernels.ops.attention.verify_mla import verify_shared_kv_fwd

        return extend_attention_fwd, verify_shared_kv_fwd, None
    except Exception as first:  # noqa: BLE001 - any import failure is a skip reason
        err = f"{type(first).__name__}: {first}"
    try:  # skip sglang/__init__ (server deps) and import the kernel modules only
        import importlib.util
        import types

        spec = importlib.util.find_spec("sglang")
        if spec is None or not spec.submodule_search_locations:
            return None, None, f"sglang not installed ({err})"
        for k in [k for k in sys.modules if k == "sglang" or k.startswith("sglang.")]:
            del sys.modules[k]
        pkg = types.ModuleType("sglang")
        pkg.__path__ = list(spec.submodule_search_locations)
        sys.modules["sglang"] = pkg
        from sglang.kernels.ops.attention.extend_attention import extend_attention_fwd
        from sglang.kernels.ops.attention.verify_mla import verify_shared_kv_fwd

        return extend_attention_fwd, verify_shared_kv_fwd, None
    except Exception as second:  # noqa: BLE001
        return None, None, f"sglang import failed: {err}; without sglang/__init__: {type(second).__name__}: {second}"


class Timer:
    def __init__(self, torch, l2_bytes):
        self.torch = torch
        self.flush_buf = torch.empty(max(4 * l2_bytes, 256 * 2**20) // 4, dtype=torch.float32, device="cuda")
        self.captured: list = []  # every captured callable: see graph()

    def graph(self, fn):
        """Capture fn into a CUDA graph (after 2 warm-up calls on a side stream); the timer keeps fn (and the
        tensors it closes over) alive, since a graph owns none of the memory its kernels address."""
        t = self.torch
        st = t.cuda.Stream()
        st.wait_stream(t.cuda.current_stream())
        with t.cuda.stream(st):
            fn()
            fn()
        t.cuda.current_stream().wait_stream(st)
        g = t.cuda.CUDAGraph()
        with t.cuda.graph(g):
            fn()
        self.captured.append(fn)
        return g

    def replay_or_eager(self, fn):
        """(callable, mode): the replay of fn captured in a CUDA graph (no host overhead), or fn
        itself when capture fails (mode says so)."""
        try:
            g = self.graph(fn)
        except Exception as exc:  # noqa: BLE001 - fall back to eager, and say so
            self.torch.cuda.synchronize()
            return fn, f"eager (graph capture failed: {type(exc).__name__})"
        return g.replay, "cuda_graph"

    def time_graph_or_eager(self, fn, warmup=WARMUP, iters=ITERS):
        """(median us, mode) of replay_or_eager(fn)."""
        run, mode = self.replay_or_eager(fn)
        return self.median_us(run, warmup, iters), mode

    def flush(self):
        self.flush_buf.fill_(1.0)  # write 4x L2 ...
        self.flush_buf[: self.flush_buf.numel() // 2].sum()  # ... then read 2x L2: clean lines only

    def kernel_us(self, fn, iters=ITERS) -> dict:
        """{kernel name (first 60 chars): mean CUPTI device time per call, us} of this project's
        kernels (names with "mla_verify") over `iters` calls of fn, each after the L2 flush: which
        kernel a time difference sits in. Empty if the profiler saw none of them."""
        from torch.profiler import ProfilerActivity, profile

        t = self.torch
        fn()
        t.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(iters):
                self.flush()
                fn()
            t.cuda.synchronize()
        return {e.key[:60]: round(e.device_time_total / iters, 3) for e in prof.key_averages() if "mla_verify" in e.key}

    def median_us(self, fn, warmup=WARMUP, iters=ITERS, pre=None):
        """Median µs of fn over `iters` calls, each after the L2 flush (and after pre(), untimed, when given:
        tests/device/cold_code.py's warm-up replay)."""
        t = self.torch
        for _ in range(warmup):
            fn()
        times = []
        for _ in range(iters):
            self.flush()
            if pre is not None:
                pre()
            s, e = t.cuda.Event(enable_timing=True), t.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e) * 1e3)
        return statistics.median(times)


def measure_ceilings(torch, timer):
    n = 2**30 // 2  # 1 GiB of bf16 per side
    src = torch.empty(n, dtype=torch.bfloat16, device="cuda").normal_()
    dst = torch.empty_like(src)
    t_copy = timer.median_us(lambda: dst.copy_(src))
    bw = 2 * n * 2 / (t_copy * 1e-6)
    src = dst = None  # free the GiB buffers before the matmul ones
    a = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
    bmat = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
    t_mm = timer.median_us(lambda: a @ bmat)
    fl = 2 * 8192**3 / (t_mm * 1e-6)
    a = bmat = None
    torch.cuda.empty_cache()
    return bw, fl


def oracle_fp32(inp, B, L, n, H):
    """Plain PyTorch fp32 gather + matmul path for a uniform batch (the 'oracle' column)."""
    import torch

    q = inp["q_extend"].view(B, n, H, 576).float()
    kb = inp["k_buffer"]
    idx = inp["kv_indices"].view(B, L)
    vis = torch.tril(torch.ones(n, n, dtype=torch.bool, device=q.device))

    def run():
        k = torch.cat([kb[idx, 0].float(), inp["k_extend"].view(B, n, 576).float()], 1)  # [B, L+n, 576]
        logits = torch.einsum("bnhd,bkd->bnhk", q, k) * inp["sm_scale"]
        logits[..., L:] = logits[..., L:].masked_fill(~vis[None, :, None, :], float("-inf"))
        p = torch.softmax(logits, -1)
        return torch.einsum("bnhk,bkd->bnhd", p, k[..., :512]).reshape(B * n, H, 512)

    return run


def bench_fp8(torch, timer, spec, shape, ceilings, bf16_us, sgl=(None, None, "not asked")):
    """The same shape with an fp8 e4m3fn cache: time, ratio to bf16, floor, error vs oracle; each fp8
    arithmetic (fp8_paths_us) and the one an eager call runs (fp8_eager_path); the other tile
    configs; SGLang's extend_attention_fwd on the same fp8 cache (it casts q and P to fp8) with both
    kernels' token agreement with the oracle (parity's LM head and near-tie rule)."""
    from mla_verify import mla_verify_fwd

    B, L, n, H = shape
    inp = make_inputs(fp8_case(spec), "cuda")
    args, kw = kernel_args(inp), kernel_kwargs(inp)
    by, fl = shape_bytes_flops(B, L, n, H, kv_bytes_per_dim=1)
    floor8 = max(by / ceilings[0], fl / ceilings[1]) * 1e6
    out = {"fp8_k_scale": FP8_K_SCALE, "fp8_bytes": by, "fp8_floor_us": floor8}
    fn = lambda: mla_verify_fwd(*args, **kw)  # noqa: E731
    out["fp8_us"], out["fp8_timing"] = timer.time_graph_or_eager(fn)
    out["fp8_over_bf16"] = out["fp8_us"] / bf16_us
    out["fp8_sol_pct"] = 100.0 * floor8 / out["fp8_us"]
    o8 = inp["o_extend"].float().clone()
    from mla_verify import api, tiles

    # the opt-in device-side choice (mla_verify_fwd's fp8_graph_gate), captured on these exact sizes
    fg = lambda: mla_verify_fwd(*args, **kw, fp8_graph_gate=True)  # noqa: E731
    out["fp8_graph_gate_us"], _ = timer.time_graph_or_eager(fg)
    out["fp8_graph_gate_over_bf16"] = out["fp8_graph_gate_us"] / bf16_us
    # fp8_us is a replay of an auto call, captured: the bf16 decode (api.fp8_f16). Each arithmetic is timed
    # explicitly, and fp8_eager_path names the one an eager auto call of these exact sizes runs (its output
    # compared bitwise with each: the kernels are deterministic).
    cfg0 = tiles.DEFAULT_CONFIG[api.device_arch(inp["o_extend"].device)]
    paths = ("bf16", "f16") if cfg0.fp8_f16_min_tokens > 0 and kw["v_scale"] <= api.FP8_MAX_V_SCALE else ("bf16",)
    outs8 = {}
    for path in ("auto",) + paths:
        mla_verify_fwd(*args, **kw, fp8_path=path)
        outs8[path] = inp["o_extend"].clone()
    out["fp8_eager_path"] = next((p for p in paths if torch.equal(outs8["auto"], outs8[p])), None)
    out["fp8_paths_us"] = {}
    for path in paths:
        fp = lambda fp8_path=path: mla_verify_fwd(*args, **kw, fp8_path=fp8_path)  # noqa: E731
        out["fp8_paths_us"][path], _ = timer.time_graph_or_eager(fp)
    out["fp8_schedule_default"] = api.FP8_SCHEDULE_DEFAULT
    out["fp8_schedules_us"] = {}
    for sched in api.FP8_SCHEDULES:  # every loader placement, same run, same inputs
        fs = lambda s=sched: mla_verify_fwd(*args, **kw, fp8_schedule=s)  # noqa: E731
        out["fp8_schedules_us"][str(sched)], _ = timer.time_graph_or_eager(fs)
        out.setdefault("fp8_schedules_rel_err_vs_default", {})[str(sched)] = float(
            (inp["o_extend"].float() - o8).norm() / o8.norm()
        )
    arch = api.device_arch(inp["o_extend"].device)
    out["fp8_configs_us"] = {}
    for cfg in tiles.ARCH_CONFIGS[arch]:
        if cfg is tiles.DEFAULT_CONFIG[arch]:
            continue
        fc = lambda c=cfg.name: mla_verify_fwd(*args, **kw, tile_config=c)  # noqa: E731
        out["fp8_configs_us"][cfg.name], _ = timer.time_graph_or_eager(fc)
        out.setdefault("fp8_configs_rel_err_vs_default", {})[cfg.name] = float(
            (inp["o_extend"].float() - o8).norm() / o8.norm()
        )
    need = B * (L + n) * 576 * 4 * 2 + B * n * H * (L + n) * 4 * 3
    ref = None
    if need < 24 * 2**30:
        ref_inp = dict(inp, k_buffer=inp["ref_k_buffer"])
        ref = oracle_fp32(ref_inp, B, L, n, H)()
        out["fp8_rel_err_vs_oracle"] = float((o8 - ref).norm() / ref.norm())
    ext = sgl[0]
    if ext is None:
        out["sglang_fp8_skipped"] = sgl[2]
    else:
        o_s = torch.empty_like(inp["o_extend"])
        s_args = list(args)
        s_args[3] = o_s
        try:
            out["sglang_extend_fp8_us"], out["sglang_extend_fp8_timing"] = timer.time_graph_or_eager(
                lambda: ext(*s_args, kw["k_scale"], kw["v_scale"], kw["sm_scale"]), warmup=1, iters=5
            )
            out["speedup_fp8_vs_sglang_extend_fp8"] = out["sglang_extend_fp8_us"] / out["fp8_us"]
            if ref is not None:
                from verify_tools.parity import lm_head, token_check

                w = lm_head(o_s.device)
                out["sglang_extend_fp8_rel_err_vs_oracle"] = float((o_s.float() - ref).norm() / ref.norm())
                out["fp8_tokens_vs_oracle"] = token_check(o8, ref, w)
                out["sglang_extend_fp8_tokens_vs_oracle"] = token_check(o_s.float(), ref, w)
        except Exception as exc:  # noqa: BLE001
            out["sglang_extend_fp8_error"] = f"{type(exc).__name__}: {exc}"[:300]
    ref = None
    inp = args = None
    torch.cuda.empty_cache()
    return out


PEER_KEYS = ("sglang_extend_us", "sglang_verify_us", "flashinfer_fa2_us", "flashinfer_fa3_us", "flashmla_us")
FLASHMLA_PAGE = 64  # FlashMLA's paged decode takes page_block_size 64 only


def import_flashmla(archs=((9, 0),), what="FlashMLA legacy dense decode"):
    """(flash_mla module, None) or (None, reason): the sgl-flash-mla wheel's `flash_mla` package with
    its legacy extension (_C_legacy: the SM90 kernels, dense MLA decode, the V3.2 656-byte fp8
    format) loaded, on a GPU whose compute capability is in `archs`. Never raises."""
    try:
        import flash_mla
    except Exception as exc:  # noqa: BLE001 - any import failure (missing, ABI, CUDA runtime) is a skip reason
        return None, f"flash_mla not importable: {type(exc).__name__}: {exc}"[:300]
    try:
        if not flash_mla.has_legacy():
            why = getattr(getattr(flash_mla, "_loader", None), "_LEGACY_UNAVAILABLE", None)
            return None, f"flash_mla's legacy extension (SM90 kernels) is not available: {why}"[:300]
        import torch

        if torch.cuda.is_available():
            cap = tuple(torch.cuda.get_device_capability())
            if cap not in tuple(archs):
                names = "/".join(f"sm_{a}{b}" for a, b in archs)
                return None, f"{what} runs on {names} only; this GPU is sm_{cap[0]}{cap[1]}"
    except Exception as exc:  # noqa: BLE001
        return None, f"flash_mla check failed: {type(exc).__name__}: {exc}"[:300]
    return flash_mla, None


def paged_copy(torch, k_buffer, slot_lists, page=FLASHMLA_PAGE, seed=0):
    """A page-`page` copy of each request's tokens, for a paged kernel (FlashMLA: 64).

    k_buffer [slots, (1,) D]; slot_lists: per request a 1-D LongTensor of its token slots in order
    (context, then drafts). Each request gets ceil(len / page) pages taken from a seeded random
    permutation of the pool (a pool's pages are scattered too); the tail of a last page is zero.
    Returns (k_cache [num_pages, page, 1, D], block_table [B, max_pages] int32 (unused entries 0),
    cache_seqlens [B] int32). Pure torch: runs on the CPU as well."""
    kb = k_buffer.reshape(k_buffer.shape[0], k_buffer.shape[-1])
    dev = kb.device
    lens = [int(s.numel()) for s in slot_lists]
    pages = [-(-n // page) for n in lens]
    total = max(1, sum(pages))
    perm = torch.randperm(total, generator=torch.Generator().manual_seed(seed))
    cache = torch.zeros(total * page, kb.shape[1], dtype=kb.dtype, device=dev)
    table = torch.zeros(len(lens), max([1] + pages), dtype=torch.int32)
    at = 0
    for b, (slots, n, p) in enumerate(zip(slot_lists, lens, pages)):
        ids = perm[at : at + p]
        at += p
        table[b, :p] = ids.to(torch.int32)
        dest = (ids[:, None] * page + torch.arange(page)[None, :]).reshape(-1)[:n]
        cache[dest.to(dev)] = kb[slots.to(dev).long()]
    seqlens = torch.tensor(lens, dtype=torch.int32, device=dev)
    return cache.view(total, page, 1, kb.shape[1]), table.to(dev), seqlens


def flashmla_peer(torch, timer, inp, B, L, n, H, scale, ours, fm=None):
    """FlashMLA's dense MLA decode (sgl-flash-mla 1.0.0, legacy SM90 kernel, bf16) on the same
    inputs as ours: a page-64 copy of each request's context + draft KV (block_table,
    cache_seqlens = L + n), q = the n draft tokens of each request [B, n, H, 576], causal=True
    (FlashMLA masks the last s_q keys bottom-right: draft i sees the context and drafts 0..i, the
    chain), scheduling metadata precomputed the way SGLang's FlashMLA backend does for target
    verify (get_mla_decoding_metadata(cache_seqlens, n * H, 1)). Timed like ours; the row gets
    `flashmla_us`, `speedup_vs_flashmla`, `rel_err_vs_flashmla`, or `flashmla_skipped` with the
    reason (not importable, wrong GPU, the exception text). NOT RUN ON A GPU YET (written
    2026-12-01 without device time): the argument layout follows flash_mla_interface.py and
    SGLang 0.5.23's flashmla_backend.py."""
    fm, reason = fm if fm is not None else import_flashmla()
    if fm is None:
        return {"flashmla_skipped": reason}
    out = {}
    try:
        idx = inp["kv_indices"].view(B, L)
        drafts = inp["draft_slots"].view(B, n)
        k_cache, table, seqlens = paged_copy(torch, inp["k_buffer"], [torch.cat([idx[b], drafts[b]]) for b in range(B)])
        q = inp["q_extend"].view(B, n, H, 576)
        meta, splits = fm.get_mla_decoding_metadata(seqlens, n * H, 1, None, False, None, use_legacy=True)
        sched = fm.flash_mla_interface.FlashMLASchedMeta(tile_scheduler_metadata=meta, num_splits=splits)

        def run():
            return fm.flash_mla_with_kvcache(
                q, k_cache, table, seqlens, 512, sched, softmax_scale=scale, causal=True, use_legacy=True
            )[0]

        o = run().reshape(B * n, H, 512).float()
        out["rel_err_vs_flashmla"] = float((ours - o).norm() / o.norm())
        out["flashmla_us"], out["flashmla_timing"] = timer.time_graph_or_eager(run)
        if not out["rel_err_vs_flashmla"] <= SANITY_REL_ERR:  # a peer computing something else is no peer
            out["flashmla_disagrees"] = f"rel err vs ours {out['rel_err_vs_flashmla']:.2e} > {SANITY_REL_ERR}"
    except Exception as exc:  # noqa: BLE001 - recorded, never fails the run
        return {"flashmla_skipped": f"{type(exc).__name__}: {exc}"[:300]}
    return out


def fastest_peer(row):
    """(name, speedup) of the fastest peer that ran and agreed with ours (> 1: we are faster)."""
    peers = {k[: -len("_us")]: row[k] for k in PEER_KEYS if row.get(k)}
    if "flashmla_disagrees" in row:
        peers.pop("flashmla", None)
    if not peers or not row.get("new_us"):
        return None, None
    best = min(peers, key=peers.get)
    return best, peers[best] / row["new_us"]


def flashinfer_peer(torch, timer, inp, B, L, n, H, scale, ours):
    """FlashInfer's MLA paged attention (page_size 1, causal chain, the drafts' KV appended to each
    request's page list), FA2 and FA3 backends, timed like ours; {key: value} for the row, with
    `flashinfer_<backend>_skipped` reasons when flashinfer is missing or a backend fails."""
    out = {}
    try:
        import flashinfer
    except Exception as exc:  # noqa: BLE001 - any import failure is a skip reason
        reason = f"flashinfer not importable: {type(exc).__name__}: {exc}"[:200]
        return {"flashinfer_fa2_skipped": reason, "flashinfer_fa3_skipped": reason}
    dev = inp["q_extend"].device
    kb = inp["k_buffer"]
    ckv, kpe = kb[:, :, :512].contiguous(), kb[:, :, 512:].contiguous()  # [slots, page_size 1, dim]
    q_nope, q_pe = inp["q_extend"][..., :512].contiguous(), inp["q_extend"][..., 512:].contiguous()
    idx = inp["kv_indices"].view(B, L)
    drafts = inp["draft_slots"].view(B, n)
    kv_indices = torch.cat([idx, drafts], 1).reshape(-1).to(torch.int32)
    kv_len = torch.full((B,), L + n, dtype=torch.int32, device=dev)
    kv_indptr = torch.arange(0, B + 1, dtype=torch.int32, device=dev) * (L + n)
    qo_indptr = inp["qo_indptr"].to(torch.int32)
    ws = torch.empty(128 * 2**20, dtype=torch.int8, device=dev)
    for backend in ("fa2", "fa3"):
        try:
            w = flashinfer.mla.BatchMLAPagedAttentionWrapper(ws, backend=backend)
            w.plan(qo_indptr, kv_indptr, kv_indices, kv_len, H, 512, 64, 1, True, scale, torch.bfloat16, torch.bfloat16)
            o = torch.empty_like(inp["o_extend"])

            def run(w=w, o=o):
                try:
                    return w.run(q_nope, q_pe, ckv, kpe, out=o)
                except TypeError:
                    return w.run(query=(q_nope, q_pe), kv_cache=(ckv, kpe), out=o)

            us, mode = timer.time_graph_or_eager(run)
            out[f"flashinfer_{backend}_us"], out[f"flashinfer_{backend}_timing"] = us, mode
            out[f"rel_err_vs_flashinfer_{backend}"] = float((ours - o.float()).norm() / o.float().norm())
        except Exception as exc:  # noqa: BLE001
            out[f"flashinfer_{backend}_skipped"] = f"{type(exc).__name__}: {exc}"[:300]
    ws = None
    return out


def min_interleaved(measure: dict, rounds: int) -> dict:
    """{name: min over `rounds` of measure[name]()}, the measurements taken in alternation (one of
    each per round, in dict order), so that a slow phase of the machine hits every side alike."""
    best = {k: math.inf for k in measure}
    for _ in range(rounds):
        for k, f in measure.items():
            best[k] = min(best[k], f())
    return best


def bench_graph_buffer(torch, timer, max_bs, n, H, lens=GRAPH_BUFFER_LENS, kv="bf16", graph_gate=False):
    """SGLang's CUDA-graph use: fixed max-size index/mask buffers, one capture, in-place rewrites. kv "fp8": the
    bench's fp8 cache (fp8_case), fp8_path "auto"; graph_gate: mla_verify_fwd's fp8_graph_gate (both sides)."""
    from mla_verify import api, mla_verify_fwd, tiles

    B, ctx = max_bs, max(lens)
    spec = CaseSpec(f"gb_B{B}_n{n}_H{H}", (ctx,) * B, (n,) * B, H, tree="chain", poison=False, seed=7 + B)
    inp = make_inputs(fp8_case(spec) if kv == "fp8" else spec, "cuda")
    dev = inp["q_extend"].device
    scale = inp["sm_scale"]
    full_idx = inp["kv_indices"].view(B, ctx)
    vis = torch.tril(torch.ones(n, n, dtype=torch.uint8, device=dev))
    gb_idx = torch.zeros(B * n * ctx, dtype=torch.int64, device=dev)  # cuda_graph_kv_indices
    gb_kvp = torch.zeros(B + 1, dtype=torch.int32, device=dev)
    gb_mask = torch.zeros(B * n * (ctx + n), dtype=torch.uint8, device=dev)
    gb_mip = torch.zeros(B + 1, dtype=torch.int64, device=dev)

    def exact(L):
        kvp = torch.arange(0, B * L + 1, max(L, 1), dtype=torch.int32, device=dev)[: B + 1] if L else None
        if kvp is None:
            kvp = torch.zeros(B + 1, dtype=torch.int32, device=dev)
        idx = full_idx[:, :L].reshape(-1).contiguous()
        blk = torch.ones(n, L + n, dtype=torch.uint8, device=dev)
        blk[:, L:] = vis
        mask = blk.flatten().repeat(B)
        mip = torch.arange(0, B + 1, dtype=torch.int64, device=dev) * (n * (L + n))
        return kvp, idx, mask, mip

    def call(kvp, idx, mask, mip, o, num_splits=None):
        a = list(kernel_args(inp))
        a[3], a[6], a[7], a[8], a[9], a[11] = o, inp["qo_indptr"], kvp, idx, mask, mip
        kw = dict(kernel_kwargs(inp), sm_scale=scale, fp8_graph_gate=graph_gate)
        return mla_verify_fwd(*a, **kw, num_splits=num_splits)

    arch = api.device_arch(dev)
    cfg = tiles.DEFAULT_CONFIG[arch]
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    o_g = torch.empty_like(inp["o_extend"])
    o_e = torch.empty_like(inp["o_extend"])
    o_eg = torch.empty_like(inp["o_extend"])
    rule = api.split_rule(B, n, H, sms, cfg, tiles.ctas_per_sm(cfg, arch))
    s_grid = api.splits_for_total(rule, B, gb_idx.numel())

    def fill(L):
        kvp, idx, mask, mip = exact(L)
        gb_kvp.copy_(kvp)
        gb_idx[: idx.numel()].copy_(idx)
        gb_mask[: mask.numel()].copy_(mask)
        gb_mip.copy_(mip)
        return kvp, idx, mask, mip

    fill(lens[0])
    g = timer.graph(lambda: call(gb_kvp, gb_idx, gb_mask, gb_mip, o_g))
    rows = []
    for L in lens:
        kvp, idx, mask, mip = fill(L)
        e_run, e_mode = timer.replay_or_eager(lambda: call(kvp, idx, mask, mip, o_e))
        # diagnostic third side: the exact-length buffers launched with the graph's split count, so
        # graph / exact_grid is what the max-sized buffers cost and exact_grid / exact what the grid does
        eg_run, _ = timer.replay_or_eager(lambda: call(kvp, idx, mask, mip, o_eg, s_grid))
        best = min_interleaved(
            {
                "graph": lambda: timer.median_us(g.replay),
                "exact": lambda: timer.median_us(e_run),
                "exact_grid": lambda: timer.median_us(eg_run),
            },
            GB_ROUNDS,
        )
        t_graph, e_us = best["graph"], best["exact"]
        try:  # diagnostic: which kernel (split or combine) holds a graph-buffer difference
            kernels = {
                k: timer.kernel_us(f) for k, f in (("graph", g.replay), ("exact", e_run), ("exact_grid", eg_run))
            }
        except Exception as exc:  # noqa: BLE001 - the breakdown never costs the row
            kernels = {"error": f"{type(exc).__name__}: {exc}"[:200]}
        rel = float((o_g.float() - o_e.float()).norm() / o_e.float().norm())
        rows.append(
            {
                "max_bs": B,
                "n": n,
                "H": H,
                "kv": kv,
                "fp8_graph_gate": graph_gate,
                "context_len": ctx,
                "L": L,
                "kv_indices_buffer_numel": gb_idx.numel(),
                "graph_buffer_us": t_graph,
                "exact_us": e_us,
                "exact_timing": e_mode,
                "ratio": t_graph / e_us,
                "exact_grid_us": best["exact_grid"],  # exact buffers, the graph's split count (diagnostic)
                "exact_grid_bitwise_graph": bool(torch.equal(o_eg, o_g)),
                "rounds": GB_ROUNDS,
                "kernels_us": kernels,  # CUPTI mean per call of each of our kernels, both sides
                "splits_graph_buffer": s_grid,  # the launch (grid, workspace) of the capture
                "splits_effective": api.splits_for_total(rule, B, idx.numel(), s_grid),  # what the device ran
                "splits_exact": api.splits_for_total(rule, B, idx.numel()),
                "rel_err_graph_vs_exact": rel,
                "replay_equal_exact_bitwise": bool(torch.equal(o_g, o_e)),
            }
        )
        print(
            f"[bench] graph-buffer {kv} B={B} n={n} H={H} L={L}: replay {t_graph:.1f}us exact {e_us:.1f}us "
            f"ratio {t_graph / e_us:.3f} exact@grid {best['exact_grid']:.1f}us S grid/eff/exact {s_grid}/{rows[-1]['splits_effective']}/"
            f"{rows[-1]['splits_exact']} rel {rel:.1e} bitwise {rows[-1]['replay_equal_exact_bitwise']} "
            f"kernels {kernels}",
            file=sys.stderr,
        )
    inp = g = None
    torch.cuda.empty_cache()
    return rows


def bench_shape(torch, timer, shape, ceilings, sgl, want_oracle=True, fp8=False, fm=None):
    from mla_verify import api, mla_verify_fwd, tiles

    B, L, n, H = shape
    spec = CaseSpec(f"B{B}_L{L}_n{n}_H{H}", (L,) * B, (n,) * B, H, tree="chain", poison=False, seed=hash(shape) % 1000)
    inp = make_inputs(spec, "cuda")
    args = kernel_args(inp)
    scale = inp["sm_scale"]
    by, fl = shape_bytes_flops(B, L, n, H)
    bw, peak = ceilings
    floor_us = max(by / bw, fl / peak) * 1e6
    row = {
        "B": B,
        "L": L,
        "n": n,
        "H": H,
        "rows_per_request": n * H,
        "bytes": by,
        "flops": fl,
        "floor_us": floor_us,
        "floor_bound": "memory" if by / bw >= fl / peak else "compute",
    }
    o_new = inp["o_extend"]
    new_fn = lambda: mla_verify_fwd(*args, sm_scale=scale)  # noqa: E731
    row["new_eager_us"] = timer.median_us(new_fn)
    new_run, row["new_timing"] = timer.replay_or_eager(new_fn)  # kept: bench_tree times it again beside the tree
    row["new_us"] = timer.median_us(new_run)
    row["sol_pct"] = 100.0 * floor_us / row["new_us"]
    new_out = o_new.clone()
    # Every other tile config built for this arch, timed the same way (same run, same inputs):
    # the ratio of the default config to its alternatives, and their agreement with it.
    arch = api.device_arch(o_new.device)
    default = tiles.DEFAULT_CONFIG[arch]
    row["tile_config"] = default.name
    row["num_splits"] = api.choose_num_splits(
        B,
        n,
        H,
        B * L,
        torch.cuda.get_device_properties(o_new.device).multi_processor_count,
        default,
        tiles.ctas_per_sm(default, arch),
    )
    row["configs_us"], row["configs_rel_err_vs_default"] = {default.name: row["new_us"]}, {}
    for cfg in tiles.ARCH_CONFIGS[arch]:
        if cfg is default:
            continue
        alt_fn = lambda c=cfg.name: mla_verify_fwd(*args, sm_scale=scale, tile_config=c)  # noqa: E731
        row["configs_us"][cfg.name], _ = timer.time_graph_or_eager(alt_fn)
        row["configs_rel_err_vs_default"][cfg.name] = float(
            (o_new.float() - new_out.float()).norm() / new_out.float().norm()
        )
    if want_oracle:
        need = B * (L + n) * 576 * 4 * 2 + B * n * H * (L + n) * 4 * 3
        if need < 24 * 2**30:
            run = oracle_fp32(inp, B, L, n, H)
            ref = run()
            row["oracle_us"], row["oracle_timing"] = timer.time_graph_or_eager(run, warmup=1, iters=5)
            row["speedup_vs_oracle"] = row["oracle_us"] / row["new_us"]
            row["rel_err_vs_oracle"] = float((new_out.float() - ref).norm() / ref.norm())
            del ref
        else:
            row["oracle_skipped"] = f"needs ~{need / 2**30:.0f} GiB"
    row.update(flashinfer_peer(torch, timer, inp, B, L, n, H, scale, new_out.float()))
    row.update(flashmla_peer(torch, timer, inp, B, L, n, H, scale, new_out.float(), fm))
    if "flashmla_us" in row:
        row["speedup_vs_flashmla"] = row["flashmla_us"] / row["new_us"]
    ext, ver, reason = sgl
    if ext is None:
        row["sglang_skipped"] = reason
    else:
        o_s = torch.empty_like(o_new)
        s_args = list(args)
        s_args[3] = o_s
        try:
            row["sglang_extend_us"], row["sglang_extend_timing"] = timer.time_graph_or_eager(
                lambda: ext(*s_args, 1.0, 1.0, scale), warmup=1, iters=5
            )
            row["speedup_vs_sglang_extend"] = row["sglang_extend_us"] / row["new_us"]
            row["rel_err_vs_sglang_extend"] = float((new_out.float() - o_s.float()).norm() / o_s.float().norm())
        except Exception as exc:  # noqa: BLE001
            row["sglang_extend_error"] = f"{type(exc).__name__}: {exc}"[:300]
        try:
            o_s.zero_()
            ran = ver(*s_args, 1.0, 1.0, scale, max_bs=B)
            if ran:
                row["sglang_verify_us"], row["sglang_verify_timing"] = timer.time_graph_or_eager(
                    lambda: ver(*s_args, 1.0, 1.0, scale, max_bs=B), 1, 5
                )
                row["speedup_vs_sglang_verify"] = row["sglang_verify_us"] / row["new_us"]
                row["rel_err_vs_sglang_verify"] = float((new_out.float() - o_s.float()).norm() / o_s.float().norm())
            else:
                row["sglang_verify_skipped"] = "verify_shared_kv_fwd returned False (shape not handled)"
        except Exception as exc:  # noqa: BLE001
            row["sglang_verify_error"] = f"{type(exc).__name__}: {exc}"[:300]
    best, speedup = fastest_peer(row)
    if best:  # the fastest peer that ran, and our speedup over it (> 1: we are faster)
        row["fastest_peer"], row["speedup_vs_fastest_peer"] = best, speedup
    if shape in TREE_SHAPES:
        row.update(bench_tree(torch, timer, spec, new_run, scale))
    inp = args = new_run = None  # free this shape's inputs before the next one
    torch.cuda.empty_cache()
    if fp8:
        row.update(bench_fp8(torch, timer, spec, shape, ceilings, row["new_us"], sgl))
    return row


def bench_tree(torch, timer, spec, chain_run, scale):
    """The shape of `spec` with a random draft tree (topk > 1: siblings branch, each token sees its ancestors)
    in place of the chain, same lengths and seed: the tree's graph replay and the chain's (`chain_run`, the one
    bench_shape timed) timed in alternation (min of TREE_ROUNDS medians, L2 flushed). tree_over_chain > 1: the tree
    is slower. The trees' correctness is the parity suite's."""
    from mla_verify import mla_verify_fwd

    t_inp = make_inputs(dataclasses.replace(spec, tree="tree"), "cuda")
    t_args = kernel_args(t_inp)
    tree_run, mode = timer.replay_or_eager(lambda: mla_verify_fwd(*t_args, sm_scale=scale))
    runs = {"chain": chain_run, "tree": tree_run}
    best = min_interleaved({k: (lambda r=r: timer.median_us(r)) for k, r in runs.items()}, TREE_ROUNDS)
    B, L, n = spec.batch, spec.prefix_lens[0], spec.draft_lens[0]
    print(f"[bench] tree B={B} L={L} n={n} H={spec.heads}: {best} ({mode})", file=sys.stderr)
    return {
        "tree_us": best["tree"],
        "tree_chain_us": best["chain"],
        "tree_over_chain": best["tree"] / best["chain"],
        "tree_timing": mode,
    }


def summarize(rows, ceilings, gb_rows=()):
    def vals(key, pred=lambda r: True):
        return [r[key] for r in rows if key in r and pred(r)]

    ext = vals("speedup_vs_sglang_extend")
    b1 = vals("speedup_vs_sglang_extend", lambda r: (r["B"], r["L"], r["n"], r["H"]) == (1, 32768, 8, 16))
    sol_long = vals("sol_pct", lambda r: r["L"] >= 32768)
    orc = vals("speedup_vs_oracle")
    mem = [r for r in rows if (r["B"], r["L"], r["n"], r["H"]) == FP8_MEM_SHAPE and "fp8_over_bf16" in r]
    eager = [r["fp8_paths_us"][r["fp8_eager_path"]] / r["new_us"] for r in mem if r.get("fp8_eager_path")]
    return {
        # a graph replay of an auto call (the bf16 decode), and an eager one (its arithmetic: fp8_eager_path)
        "fp8_over_bf16_mem_shape": mem[0]["fp8_over_bf16"] if mem else None,
        "fp8_eager_over_bf16_mem_shape": eager[0] if eager else None,
        # the same replay with the opt-in fp8_graph_gate (the kernel an eager call of its length runs)
        "fp8_graph_gate_over_bf16_mem_shape": mem[0].get("fp8_graph_gate_over_bf16") if mem else None,
        "max_fp8_over_bf16": max(vals("fp8_over_bf16"), default=None),
        "max_fp8_rel_err_vs_oracle": max(vals("fp8_rel_err_vs_oracle"), default=None),
        "max_tree_over_chain": max(vals("tree_over_chain"), default=None),
        "max_graph_buffer_ratio": max((r["ratio"] for r in gb_rows), default=None),
        "max_graph_buffer_rel_err": max((r["rel_err_graph_vs_exact"] for r in gb_rows), default=None),
        "graph_buffer_bitwise_equal": sum(1 for r in gb_rows if r["replay_equal_exact_bitwise"]),
        "graph_buffer_rows": len(gb_rows),
        "shapes": len(rows),
        "min_speedup_vs_sglang_extend": min(ext) if ext else None,
        "speedup_vs_sglang_extend_b1_32k": b1[0] if b1 else None,
        "min_speedup_vs_sglang_verify": min(vals("speedup_vs_sglang_verify"), default=None),
        "min_sol_pct_long_ctx": min(sol_long) if sol_long else None,
        "min_sol_pct": min(vals("sol_pct"), default=None),
        "min_speedup_vs_fastest_peer": min(vals("speedup_vs_fastest_peer"), default=None),
        "min_speedup_vs_flashmla": min(vals("speedup_vs_flashmla"), default=None),
        "flashmla_rows": len(vals("flashmla_us")),
        "geomean_speedup_vs_oracle": math.exp(sum(map(math.log, orc)) / len(orc)) if orc else None,
        "max_rel_err_vs_oracle": max(vals("rel_err_vs_oracle"), default=None),
        "copy_bw_gbs": ceilings[0] / 1e9,
        "matmul_tflops": ceilings[1] / 1e12,
    }


def plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sweep = sorted([r for r in rows if (r["B"], r["n"], r["H"]) == (1, 8, 16)], key=lambda r: r["L"])
    if not sweep:
        sweep = sorted(rows, key=lambda r: r["L"])

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.8), dpi=80)
    for key, label in (
        ("new_us", "bundled kernel"),
        ("oracle_us", "torch fp32 oracle"),
        ("sglang_extend_us", "SGLang extend_attention_fwd"),
        ("sglang_verify_us", "SGLang verify_shared_kv_fwd"),
        ("floor_us", "roofline floor"),
    ):
        pts = [(r["L"], r[key]) for r in sweep if key in r]
        if pts:
            a1.plot(*zip(*pts), marker="o", label=label, linestyle="--" if key == "floor_us" else "-")
            if key != "floor_us":
                a2.plot(
                    [p[0] for p in pts],
                    [100 * r["floor_us"] / r[key] for r in sweep if key in r],
                    marker="o",
                    label=label,
                )
    for ax in (a1, a2):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("prefix length L (B=1, n=8, H=16)")
        ax.grid(alpha=0.3)
    a1.set_yscale("log")
    a1.set_ylabel("time (us, median, L2 flushed)")
    a2.set_ylabel("SOL % (floor / time)")
    a2.set_yscale("log")
    a1.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)


def blocked_doc(reason):
    return tool_blocked_doc(
        reason,
        device=None,
        rows=[],
        summary={
            "min_speedup_vs_sglang_extend": None,
            "speedup_vs_sglang_extend_b1_32k": None,
            "min_sol_pct_long_ctx": None,
            "geomean_speedup_vs_oracle": None,
            "fp8_over_bf16_mem_shape": None,
            "fp8_eager_over_bf16_mem_shape": None,
            "fp8_graph_gate_over_bf16_mem_shape": None,
            "max_graph_buffer_ratio": None,
            "graph_buffer_bitwise_equal": None,
            "max_tree_over_chain": None,
            "copy_bw_gbs": None,
            "matmul_tflops": None,
        },
    )


def parse_shapes(text: str) -> list[tuple]:
    """[(B, L, n, H)] from "B:L:n:H,..." (integers; B, n, H >= 1, L >= 0); ValueError names the item."""
    out = []
    for item in text.split(","):
        parts = item.strip().split(":")
        try:
            vals = tuple(int(x) for x in parts)
        except ValueError:
            vals = ()
        if len(vals) != 4 or min(vals[0], vals[2], vals[3]) < 1 or vals[1] < 0:
            raise ValueError(f"{item.strip()!r} is not B:L:n:H (B, n, H >= 1, L >= 0)")
        out.append(vals)
    return out


AB_SHAPES = (
    (1, 512, 8, 16),
    (1, 4096, 8, 16),
    (1, 32768, 8, 16),
    (1, 131072, 8, 16),
    (8, 32768, 8, 16),
    (32, 8192, 8, 16),
    (4, 131072, 4, 16),
)


def load_tree(arch, csrc_dir, extra=()):
    """JIT build of another copy of mla_verify's csrc/ (e.g. an older commit's, extracted with
    git archive) with the same flags and sources as the checkout's, plus `extra` compiler flags
    (e.g. -DMLAV_TRACE=1: tests/device/dense_trace.py); development only."""
    from mla_verify import _build

    return _build.compile_tree(
        arch,
        csrc_dir,
        prefix="mla_verify",
        sources=_build.SOURCES,
        headers=_build.HEADERS,
        nvcc=_build.nvcc_flags(arch),
        extra=list(extra),
    )


FWD_NARGS = 26  # the binding's fwd arguments as api.mla_verify_fwd passes them; the last, fp8_f16, the 26th


class _ArgsFit:
    """A tree's module whose fwd takes fewer arguments than the checkout passes (built before a trailing one
    was added, e.g. fp8_f16): fwd drops the extras, so the tree runs as it was built. A tree built before the gated
    graph launches (fp8_f16 3 and 4; no config_fp8_ws_min_tokens) gets the flags the checkout's api gave a capture
    before them: 0 for "auto" (3), the warp-specialized kernel for "f16" (4)."""

    OLD_CAPTURE_FLAGS = {3: 0, 4: 2}

    def __init__(self, mod):
        self.mod = mod
        sig = (getattr(mod.fwd, "__doc__", "") or "").split("\n")[0]  # pybind11: "fwd(arg0: ..., argN: ...) -> None"
        n = [int(x) for x in re.findall(r"\barg(\d+):", sig)]
        self.nargs = max(n) + 1 if n else None
        self.gated = hasattr(mod, "config_fp8_ws_min_tokens")

    def __getattr__(self, name):
        return getattr(self.mod, name)

    def fwd(self, *args):
        args = args if self.nargs is None else args[: self.nargs]
        if not self.gated and len(args) == FWD_NARGS:  # the last one is fp8_f16
            args = (*args[:-1], self.OLD_CAPTURE_FLAGS.get(args[-1], args[-1]))
        return self.mod.fwd(*args)


class _TreeModule:
    """Routes mla_verify_fwd through `mod` (its `from ._build import load` is looked up per call)
    while active; mod None: the checkout's own build."""

    def __init__(self, mod):
        self.mod = mod

    def __enter__(self):
        from mla_verify import _build

        self.prev = _build.load
        if self.mod is not None:
            fit = _ArgsFit(self.mod)
            _build.load = lambda arch: fit
        return self

    def __exit__(self, *exc):
        from mla_verify import _build

        _build.load = self.prev
        return False


def tree_ab(
    torch,
    timer,
    trees,
    reps=3,
    iters=30,
    gb_trees=None,
    dump=None,
    configs=("auto",),
    shapes=AB_SHAPES,
    kv="bf16",
    fp8_paths=("auto",),
    gb_kvs=("bf16",),
    graph_gate=False,
):
    """Same-process A/B of source trees (name -> csrc dir, JIT-built here; "cur" = this checkout),
    tile configs and fp8 arithmetics (each tree runs each of `configs` x `fp8_paths`; with more than
    one, a variant is named "tree/config" and/or ".../path"; a tree built before the fp8_path flag
    runs its own fp8 kernel under every path): graph-replay times of `shapes` with L2 flushed (min
    over `reps` interleaved medians of `iters`; kv "fp8": the cache as bench_fp8 stores it), outputs
    compared bitwise to "base" (same config and path) if given, graph-buffer rows through
    bench_graph_buffer (gb_kvs x GRAPH_BUFFER_SHAPES x GRAPH_BUFFER_LENS, default config, for the
    trees in gb_trees, default all) and per-kernel CUPTI times of eager calls (auto path). dump(doc)
    after every row."""
    from torch.profiler import ProfilerActivity, profile

    from mla_verify import api, mla_verify_fwd

    arch = api.device_arch(torch.device("cuda"))
    tree_mods = {"cur": None}
    tree_mods.update({k: load_tree(arch, d) for k, d in trees.items()})
    mods, cfg_of, path_of = {}, {}, {}

    def variant(tree, c, path):
        return tree + (f"/{c}" if len(configs) > 1 else "") + (f"/{path}" if len(fp8_paths) > 1 else "")

    for k, m in tree_mods.items():
        for c, path in itertools.product(configs, fp8_paths):
            name = variant(k, c, path)
            mods[name], cfg_of[name], path_of[name] = m, c, path
    doc = {
        "trees": trees,
        "configs": list(configs),
        "fp8_paths": list(fp8_paths),
        "kv": kv,
        "reps": reps,
        "iters": iters,
        "ab": [],
        "graph_buffer": [],
        "cupti": [],
    }

    def inputs(B, L, n, H):
        inp = make_inputs(ab_case(B, L, n, H, kv), "cuda")
        return inp, list(kernel_args(inp))

    for B, L, n, H in shapes:
        inp, a = inputs(B, L, n, H)
        times = {k: [] for k in mods}
        outs = {}
        for _ in range(reps):
            for k, m in mods.items():
                with _TreeModule(m):
                    us, _ = timer.time_graph_or_eager(
                        lambda c=cfg_of[k], fp=path_of[k]: mla_verify_fwd(
                            *a, **kernel_kwargs(inp), tile_config=c, fp8_path=fp, fp8_graph_gate=graph_gate
                        ),
                        3,
                        iters,
                    )
                times[k].append(us)
                outs[k] = inp["o_extend"].clone()
        mn = {k: round(min(v), 3) for k, v in times.items()}
        row = {"B": B, "L": L, "n": n, "H": H, "us": mn, "runs": times}
        if "base" in trees:  # each variant against base with the same tile config and fp8 path
            bk = {k: variant("base", cfg_of[k], path_of[k]) for k in mods}
            row["ratio_over_base"] = {k: round(v / mn[bk[k]], 4) for k, v in mn.items()}
            row["bitwise_equal_base"] = {k: bool(torch.equal(v, outs[bk[k]])) for k, v in outs.items()}
        doc["ab"].append(row)
        if dump:
            dump(doc)
        print(f"[ab] B={B} L={L} n={n} H={H}: {mn} over base {row.get('ratio_over_base')}", file=sys.stderr)
    for k, m in tree_mods.items():
        with _TreeModule(m):
            gb = itertools.product(gb_kvs, GRAPH_BUFFER_SHAPES) if gb_trees is None or k in gb_trees else ()
            for gkv, (max_bs, n, h) in gb:
                for r in bench_graph_buffer(torch, timer, max_bs, n, h, kv=gkv, graph_gate=graph_gate):
                    r["tree"] = k
                    doc["graph_buffer"].append(r)
                    if dump:
                        dump(doc)
                    print(
                        f"[ab] graph-buffer {k} {gkv} B={max_bs} n={n} L={r['L']}: {r['graph_buffer_us']:.2f} vs "
                        f"{r['exact_us']:.2f} ratio {r['ratio']:.3f} bitwise {r['replay_equal_exact_bitwise']}",
                        file=sys.stderr,
                    )
            for (B, L, n, H), c in itertools.product(
                ((1, 4096, 8, 16), (8, 32768, 8, 16), (32, 8192, 8, 16), (4, 131072, 4, 16)), configs
            ):
                inp, a = inputs(B, L, n, H)
                for _ in range(3):
                    mla_verify_fwd(*a, **kernel_kwargs(inp), tile_config=c)
                torch.cuda.synchronize()
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for _ in range(20):
                        mla_verify_fwd(*a, **kernel_kwargs(inp), tile_config=c)
                    torch.cuda.synchronize()
                ks = {e.key[:48]: round(e.device_time, 2) for e in prof.key_averages() if "mla_verify" in e.key}
                doc["cupti"].append({"tree": k, "config": c, "B": B, "L": L, "n": n, "H": H, "kernels_us": ks})
                if dump:
                    dump(doc)
                print(f"[ab] cupti {k} B={B} L={L}: {ks}", file=sys.stderr)
    return doc


def ab_summary(doc: dict) -> list[str]:
    """The lines device scripts print at the end of an A/B call, from a --tree-ab JSON document: one per timed
    row (shape, µs per variant, time over base and bitwise equality with it where the document has a base tree),
    then one per graph-buffer row (ratio, bitwise), then one per CUPTI record."""
    lines = []
    for r in doc.get("ab", []):
        line = f"B={r['B']} L={r['L']} n={r['n']} H={r['H']}: us {r['us']}"
        if "ratio_over_base" in r:
            line += f" over base {r['ratio_over_base']} bitwise {r['bitwise_equal_base']}"
        lines.append(line)
    for g in doc.get("graph_buffer", []):
        lines.append(
            f"graph-buffer {g['tree']} B={g['max_bs']} n={g['n']} L={g['L']}: "
            f"ratio {g['ratio']:.3f} bitwise {g['replay_equal_exact_bitwise']}"
        )
    for c in doc.get("cupti", []):
        lines.append(f"cupti {c['tree']} {c.get('config', 'auto')} B={c['B']} L={c['L']}: {c['kernels_us']}")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m verify_tools.bench", description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--plot", default=None, help="write a PNG: time and SOL% vs context")
    ap.add_argument("--quick", action="store_true", help="three shapes only")
    ap.add_argument("--shapes", default="", help="B:L:n:H,... instead of the built-in list")
    ap.add_argument("--no-sglang", action="store_true", help="skip SGLang's kernels")
    ap.add_argument("--no-flashmla", action="store_true", help="skip FlashMLA's dense decode peer")
    ap.add_argument("--fp8", action="store_true", help="also time an fp8 cache on every shape (default: FP8_SHAPES)")
    ap.add_argument(
        "--graph-buffer",
        action="store_true",
        help="run the CUDA-graph max-buffer mode (default only with the built-in shape list)",
    )
    ap.add_argument("--no-graph-buffer", action="store_true", help="skip the graph-buffer mode")
    ap.add_argument("--tree-ab", default=None, help="name=csrc_dir,...: same-process A/B of source trees; JSON doc")
    ap.add_argument("--ab-out", default=None, help="--tree-ab: also write the (partial) JSON doc here after every row")
    ap.add_argument("--ab-gb-trees", default=None, help="--tree-ab: graph-buffer rows only for these trees (cur,base)")
    ap.add_argument("--ab-reps", type=int, default=3, help="--tree-ab: interleaved medians per tree and shape")
    ap.add_argument(
        "--ab-summary",
        default=None,
        metavar="FILE",
        help="print one line per row of a --tree-ab JSON FILE (no device needed) and exit",
    )
    ap.add_argument(
        "--ab-configs",
        default="auto",
        help="--tree-ab: tile configs each tree runs (auto,sm90); an empty or unknown name exits 2",
    )
    ap.add_argument(
        "--ab-kv",
        choices=("bf16", "fp8"),
        default="bf16",
        help="--tree-ab: the cache of the timed rows and CUPTI calls (graph-buffer rows: --gb-kv)",
    )
    ap.add_argument(
        "--gb-kv",
        default="bf16",
        help="caches of the graph-buffer rows (bf16,fp8; fp8 runs fp8_path auto); an unknown one exits 2",
    )
    ap.add_argument(
        "--fp8-graph-gate",
        action="store_true",
        help="captures of fp8 calls in the graph-buffer rows and --tree-ab take mla_verify_fwd's fp8_graph_gate",
    )
    ap.add_argument(
        "--ab-fp8-paths",
        default="auto",
        help="--tree-ab: fp8 arithmetics each tree runs (auto,bf16,f16: mla_verify_fwd's fp8_path); an unknown one exits 2",
    )
    a = ap.parse_args(argv)
    if a.ab_summary is not None:
        try:
            with open(a.ab_summary, encoding="utf-8") as fh:
                lines = ab_summary(json.load(fh))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            ap.error(f"--ab-summary {a.ab_summary}: {type(exc).__name__}: {exc}")
        print("\n".join(lines))
        return 0
    gb_kvs = [x for x in a.gb_kv.split(",") if x]
    if not gb_kvs or any(x not in ("bf16", "fp8") for x in gb_kvs):
        ap.error(f"--gb-kv: want bf16,fp8 or one of them, got {a.gb_kv!r}")
    try:
        shapes = parse_shapes(a.shapes) if a.shapes else (QUICK if a.quick else SWEEP + ANCHORS + EXTRA)
    except ValueError as exc:
        ap.error(f"--shapes: {exc}")
    if a.tree_ab is not None:  # checked before any device work: a bad list exits 2 and runs nothing
        from mla_verify import tiles

        items = [x for x in a.tree_ab.split(",") if x]
        if not items or any("=" not in x or x.startswith("=") for x in items):
            ap.error(f"--tree-ab: want NAME=CSRC_DIR,..., got {a.tree_ab!r}")
        trees = dict(x.split("=", 1) for x in items)
        ab_cfgs = [c for c in a.ab_configs.split(",") if c]
        unknown = [c for c in ab_cfgs if c != "auto" and c not in tiles.CONFIGS]
        if unknown or not ab_cfgs:
            ap.error(
                f"--ab-configs: {','.join(unknown) or repr(a.ab_configs)} not among auto,{','.join(tiles.CONFIGS)}"
            )
        from mla_verify.api import FP8_PATHS

        ab_paths = [x for x in a.ab_fp8_paths.split(",") if x]
        bad = [x for x in ab_paths if x not in FP8_PATHS]
        if bad or not ab_paths:
            ap.error(f"--ab-fp8-paths: {','.join(bad) or repr(a.ab_fp8_paths)} not among {','.join(FP8_PATHS)}")
    try:
        import torch
    except ImportError as exc:
        return emit(blocked_doc(f"torch not importable: {exc}"), a.json, EXIT_BLOCKED)
    if not torch.cuda.is_available():
        return emit(blocked_doc(f"no CUDA device on host {socket.gethostname()}"), a.json, EXIT_BLOCKED)
    sgl = (None, None, "--no-sglang given") if a.no_sglang else import_sglang()
    fm = (None, "--no-flashmla given") if a.no_flashmla else import_flashmla()
    props = torch.cuda.get_device_properties(0)
    timer = Timer(torch, getattr(props, "L2_cache_size", 64 * 2**20))
    if a.tree_ab is not None:
        gbt = set(a.ab_gb_trees.split(",")) if a.ab_gb_trees else None

        def dump(d, path=a.ab_out):
            if path:
                with open(path, "w", encoding="utf-8") as fh:
                    json.dump(d, fh, indent=1)

        doc = tree_ab(
            torch,
            timer,
            trees,
            reps=a.ab_reps,
            gb_trees=gbt,
            dump=dump,
            configs=ab_cfgs,
            shapes=shapes if a.shapes else AB_SHAPES,  # --shapes, parsed and checked above
            kv=a.ab_kv,
            fp8_paths=ab_paths,
            gb_kvs=gb_kvs,
            graph_gate=a.fp8_graph_gate,
        )
        dump(doc)
        print(json.dumps(doc, indent=1))
        return 0
    ceilings = measure_ceilings(torch, timer)
    print(
        f"[bench] copy {ceilings[0] / 1e9:.0f} GB/s, bf16 matmul {ceilings[1] / 1e12:.0f} TFLOP/s; "
        f"sglang: {'ok' if sgl[0] else sgl[2]}; flashmla: {'ok' if fm[0] else fm[1]}",
        file=sys.stderr,
    )
    rows, errors = [], []
    for shape in shapes:
        try:
            r = bench_shape(torch, timer, shape, ceilings, sgl, fp8=a.fp8 or shape in FP8_SHAPES, fm=fm)
        except Exception as exc:  # noqa: BLE001 - reported, fails the run
            errors.append(f"{shape}: {type(exc).__name__}: {exc}")
            print(f"[bench] {shape} FAILED {exc}", file=sys.stderr)
            continue
        rows.append(r)
        print(
            f"[bench] {shape} new {r['new_us']:.1f}us floor {r['floor_us']:.1f}us SOL {r['sol_pct']:.1f}% "
            f"ext {r.get('sglang_extend_us', float('nan')):.0f}us ver {r.get('sglang_verify_us', float('nan')):.0f}us "
            f"oracle {r.get('oracle_us', float('nan')):.0f}us S={r['num_splits']} "
            f"configs {' '.join(f'{k}={v:.1f}' for k, v in r['configs_us'].items())}"
            + (f" fp8 {r['fp8_us']:.1f}us x{r['fp8_over_bf16']:.2f} {r.get('fp8_configs_us')}" if "fp8_us" in r else "")
            + (
                f" sgl-ext-fp8 {r['sglang_extend_fp8_us']:.0f}us tokens ours/sgl "
                f"{r.get('fp8_tokens_vs_oracle', {}).get('token_mismatches')}/"
                f"{r.get('sglang_extend_fp8_tokens_vs_oracle', {}).get('token_mismatches')}"
                if "sglang_extend_fp8_us" in r
                else ""
            ),
            file=sys.stderr,
        )
    gb_rows = []
    if (a.graph_buffer or not (a.shapes or a.quick)) and not a.no_graph_buffer:
        for kv, (max_bs, n, h) in itertools.product(gb_kvs, GRAPH_BUFFER_SHAPES):
            try:
                gb_rows += bench_graph_buffer(torch, timer, max_bs, n, h, kv=kv, graph_gate=a.fp8_graph_gate)
            except Exception as exc:  # noqa: BLE001 - reported, fails the run
                errors.append(f"graph-buffer {kv} {(max_bs, n, h)}: {type(exc).__name__}: {exc}")
                print(f"[bench] graph-buffer {kv} {(max_bs, n, h)} FAILED {exc}", file=sys.stderr)
    bad = [r for r in rows if r.get("rel_err_vs_oracle", 0) > SANITY_REL_ERR]
    errors += [f"B{r['B']} L{r['L']}: rel_err_vs_oracle {r['rel_err_vs_oracle']:.2e}" for r in bad]
    bad8 = [
        r
        for r in rows
        if max([r.get("fp8_rel_err_vs_oracle", 0)] + list(r.get("fp8_schedules_rel_err_vs_default", {}).values()))
        > SANITY_REL_ERR
    ]
    errors += [f"B{r['B']} L{r['L']} fp8: rel_err_vs_oracle {r['fp8_rel_err_vs_oracle']:.2e}" for r in bad8]
    badg = [r for r in gb_rows if r["rel_err_graph_vs_exact"] > SANITY_REL_ERR]
    errors += [f"graph-buffer L{r['L']}: rel_err vs exact {r['rel_err_graph_vs_exact']:.2e}" for r in badg]
    doc = {
        "ok": not errors and bool(rows),
        "device": torch.cuda.get_device_name(0),
        "sm_count": props.multi_processor_count,
        "method": {
            "warmup": WARMUP,
            "iters": ITERS,
            "statistic": "median",
            "l2_flush_bytes": timer.flush_buf.numel() * 4,
        },
        "sglang": "available" if sgl[0] else sgl[2],
        "flashmla": "available" if fm[0] else fm[1],
        "errors": errors,
        "rows": rows,
        "graph_buffer": gb_rows,
        "summary": summarize(rows, ceilings, gb_rows),
    }
    if a.plot and rows:
        plot(rows, a.plot)
        doc["plot"] = a.plot
    return emit(doc, a.json, 0 if doc["ok"] else 1)


def emit(doc, as_json, code):
    return emit_doc(doc, as_json, code, human=None if doc.get("blocked") else _print_table)


def _print_table(doc):
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"MLA verify bench on {doc['device']}")
    for col in ("B", "L", "n", "H", "new us", "floor us", "SOL%", "x oracle", "x sgl extend", "x sgl verify"):
        t.add_column(col, justify="right")
    f = lambda v, p=1: "-" if v is None else f"{v:.{p}f}"  # noqa: E731
    for r in doc["rows"]:
        t.add_row(
            str(r["B"]),
            str(r["L"]),
            str(r["n"]),
            str(r["H"]),
            f(r["new_us"]),
            f(r["floor_us"]),
            f(r["sol_pct"]),
            f(r.get("speedup_vs_oracle")),
            f(r.get("speedup_vs_sglang_extend")),
            f(r.get("speedup_vs_sglang_verify")),
        )
    Console().print(t)
    print(json.dumps(doc["summary"]))


if __name__ == "__main__":
    sys.exit(main())
