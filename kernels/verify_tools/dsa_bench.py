"""Microbenchmark of the sparse (DSA) MLA verify kernel (phase 2): ratios measured in one run.

Usage: python -m verify_tools.dsa_bench [--json] [--quick] [--budget-s SECONDS] [--reps N]

Grid: B 1/8/32 requests x L 4k/32k/128k prefix x n 4/8 chain drafts (T = B*n rows) x H 8/64
heads x bf16/fp8 (656-byte rows) KV, topk 2048, sm_scale 1/16, inputs from dsa_verify/inputs.py
(scattered 64-token pages, synthetic-indexer top-k, rho 0.9). The headline shapes run first;
--budget-s stops the grid when its time is spent and lists the shapes left out.
Timing: every kernel is captured in a CUDA graph and each replay is timed with CUDA events,
after a write of a buffer twice the L2 size (L2 flush), median of --reps replays.
Ceilings measured in the same run: copy bandwidth (device-to-device copy of 1 GiB, bytes read +
written) and bf16 matmul rate (8192^3). floor = max(bytes / BW, FLOPs / F) with bytes = the used
KV rows (row bytes each: 1152 bf16, 656 fp8) + indices + q + out, FLOPs = 2 * rows * H * used *
(576 + 512). `floor` counts every row's entries (no sharing: what every incumbent reads);
`floor_shared` counts each distinct slot of a request once (the gain available to a kernel that
reads a slot shared by several draft rows once). Peers: SGLang 0.5.23's DSA Triton kernel
`triton_sparse_mla_fwd` (bf16 cache; it cannot read the 656-byte fp8 rows, so fp8 rows compare
against our own bf16 time), FlashMLA sparse and FA3 (skipped: not installed on the host, no
network to build them). Exit 0 ran, 1 a kernel failed, 75 no CUDA device.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import time

from dsa_verify.inputs import DsaCase, make_inputs, topk_overlap
from tool_contract import EXIT_BLOCKED, blocked_doc, emit

SM_SCALE = 0.0625
TOPK = 2048
HEADLINE = ((1, 32768, 4, 8), (1, 32768, 8, 8), (8, 32768, 8, 8), (32, 32768, 8, 8), (32, 32768, 8, 64))


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


class Timer:
    """Graph-captured callable timed per replay with an L2 flush before each."""

    def __init__(self, device):
        import torch

        l2 = torch.cuda.get_device_properties(device).L2_cache_size
        self.flush = torch.empty(max(2 * l2, 1 << 26) // 4, dtype=torch.float32, device=device)

    def time(self, fn, reps: int) -> float:
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
        ts = []
        for _ in range(reps):
            self.flush.fill_(1.0)
            st, en = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            st.record()
            g.replay()
            en.record()
            en.synchronize()
            ts.append(st.elapsed_time(en) * 1e-3)
        return statistics.median(ts)


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
    """Where the small-T time goes (headline shape B=1, L=32k, n=4, H=8): graph replay with and
    without the L2 flush, an empty graph (the replay-timing overhead), each split count, and the
    CUPTI kernel durations of one replay (torch.profiler)."""
    import torch

    from dsa_verify.api import dsa_verify_fwd, workspace_numel_for

    spec = DsaCase("diag", (32768,), 4, 8, seed=3, poison=False)
    d = make_inputs(spec, device)
    q, kv, pt, sl = d["q_all"], d["kv_cache"], d["page_table_1"], d["seq_lens"]
    timer = Timer(device)
    res = {}
    x = torch.zeros(1, device=device)
    res["empty_graph_s"] = timer.time(lambda: x.add_(1), reps)
    out = torch.empty(4, 8, 512, dtype=torch.bfloat16, device=device)
    for kvname, cache in (("bf16", kv), ("fp8", None)):
        if cache is None:
            from dsa_verify.layout import quantize_rows

            cache = quantize_rows(kv.reshape(-1, 576)).reshape(-1, 1, 656)
        for S in (1, 4, 8, 16, 32, 64):
            ws = torch.empty(max(1, workspace_numel_for(q, cache, pt, num_splits=S)), device=device)
            res[f"{kvname}_S{S}_s"] = timer.time(
                lambda c=cache, S=S, ws=ws: dsa_verify_fwd(q, c, pt, sl, SM_SCALE, out=out, workspace=ws, num_splits=S),
                reps,
            )
        ws = torch.empty(max(1, workspace_numel_for(q, cache, pt)), device=device)
        fn = lambda c=cache, ws=ws: dsa_verify_fwd(q, c, pt, sl, SM_SCALE, out=out, workspace=ws)  # noqa: E731
        saved = timer.flush
        timer.flush = torch.empty(1, device=device)
        res[f"{kvname}_auto_noflush_s"] = timer.time(fn, reps)
        timer.flush = saved
        from torch.profiler import ProfilerActivity, profile

        fn()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                timer.flush.fill_(1.0)
                fn()
            torch.cuda.synchronize()
        res[f"{kvname}_kernels_us"] = {
            e.key[:60]: round(e.device_time_total / max(1, e.count), 2)
            for e in prof.key_averages()
            if "dsa" in e.key or "fill" in e.key.lower()
        }
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m verify_tools.dsa_bench", description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--quick", action="store_true", help="headline shapes only")
    ap.add_argument("--budget-s", type=float, default=1e9, help="stop the grid after this many seconds")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--out", default="", help="also write the JSON document to this file")
    ap.add_argument("--diag", action="store_true", help="small-T time breakdown only")
    a = ap.parse_args(argv)
    try:
        import torch
    except Exception as exc:
        return _emit(blocked_doc(f"torch not importable: {exc}"), a, EXIT_BLOCKED)
    if not torch.cuda.is_available():
        return _emit(blocked_doc(f"no CUDA device on host {socket.gethostname()}"), a, EXIT_BLOCKED)
    from dsa_verify.api import device_info, dsa_verify_fwd, resolve, workspace_numel_for
    from dsa_verify.layout import quantize_rows
    from verify_tools.dsa_parity import sglang_triton

    device = torch.device("cuda", torch.cuda.current_device())
    arch, sms = device_info(device)
    if a.diag:
        print(json.dumps(diag(device, a.reps), indent=1))
        return 0
    t_start = time.time()
    ceil = measure_ceilings(device)
    bw, fl = ceil["copy_bytes_per_s"], ceil["bf16_matmul_flops_per_s"]
    timer = Timer(device)
    peer, peer_reason = sglang_triton()
    rows, left_out, failures = [], [], 0
    for B, L, n, H in grid(a.quick):
        if time.time() - t_start > a.budget_s:
            left_out.append({"B": B, "L": L, "n": n, "H": H})
            continue
        spec = DsaCase(f"b{B}_L{L}_n{n}_h{H}", (L,) * B, n, H, seed=B * 7 + n, poison=False)
        d = make_inputs(spec, device)
        d["n"] = n
        ov = topk_overlap(d["page_table_1"].cpu(), d["seq_lens"].cpu(), n)
        q, pt, sl = d["q_all"], d["page_table_1"], d["seq_lens"]
        caches = {"bf16": d["kv_cache"]}
        caches["fp8"] = quantize_rows(d["kv_cache"].reshape(-1, 576)).reshape(-1, 1, 656)
        T = q.shape[0]
        per_kv = {}
        for kvname, kv in caches.items():
            row_bytes = 1152 if kvname == "bf16" else 656
            byt, n_used = shape_bytes(d, H, row_bytes, shared=False)
            byt_sh, _ = shape_bytes(d, H, row_bytes, shared=True)
            flops = 2 * H * n_used * (576 + 512)
            floor = max(byt / bw, flops / fl)
            floor_sh = max(byt_sh / bw, flops / fl)
            out = torch.empty(T, H, 512, dtype=torch.bfloat16, device=device)
            ws = torch.empty(max(1, workspace_numel_for(q, kv, pt)), dtype=torch.float32, device=device)
            _, cfg, S, chunk = resolve(device, H, TOPK, T, kvname == "fp8")
            row = {
                "B": B,
                "L": L,
                "n": n,
                "T": T,
                "H": H,
                "kv": kvname,
                "config": cfg.name,
                "splits": S,
                "floor_s": floor,
                "floor_bound": "bytes" if byt / bw >= flops / fl else "flops",
                "floor_shared_s": floor_sh,
                "overlap": ov,
            }
            try:
                t_ours = timer.time(
                    lambda q=q, kv=kv, pt=pt, sl=sl, out=out, ws=ws: dsa_verify_fwd(
                        q, kv, pt, sl, SM_SCALE, out=out, workspace=ws
                    ),
                    a.reps,
                )
                row["ours_s"] = t_ours
                row["sol"] = floor / t_ours
                row["sol_shared"] = floor_sh / t_ours
            except Exception as exc:
                row["ours_error"] = f"{type(exc).__name__}: {exc}"[:300]
                failures += 1
            if kvname == "bf16":
                if peer is None:
                    row["sglang_triton"] = {"skipped": peer_reason}
                else:
                    try:
                        t_p = timer.time(lambda q=q, kv=kv, pt=pt: peer(q, kv, pt, SM_SCALE), a.reps)
                        row["sglang_triton"] = {"s": t_p, "sol": floor / t_p}
                        if "ours_s" in row:
                            row["speedup_vs_sglang_triton"] = t_p / row["ours_s"]
                    except Exception as exc:
                        row["sglang_triton"] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
            else:
                row["sglang_triton"] = {"skipped": "cannot read SGLang's 656-byte fp8 rows (raw e4m3 only)"}
            row["flashmla_sparse"] = {"skipped": "sgl-flash-mla not installed on this host; no network to build it"}
            row["fa3"] = {"skipped": "flash-attn 3 not installed on this host"}
            per_kv[kvname] = row
            rows.append(row)
            out = ws = None
        if "ours_s" in per_kv.get("fp8", {}) and "ours_s" in per_kv.get("bf16", {}):
            per_kv["fp8"]["fp8_over_bf16_time"] = per_kv["fp8"]["ours_s"] / per_kv["bf16"]["ours_s"]
        for r in per_kv.values():
            peers = {"ours": r.get("ours_s")}
            if isinstance(r.get("sglang_triton"), dict) and "s" in r["sglang_triton"]:
                peers["sglang_triton"] = r["sglang_triton"]["s"]
            if r["kv"] == "fp8" and "ours_s" in per_kv["bf16"]:
                peers["ours_bf16"] = per_kv["bf16"]["ours_s"]
            live = {k: v for k, v in peers.items() if v}
            r["fastest"] = min(live, key=live.get) if live else None
        d = caches = q = pt = sl = None
        torch.cuda.empty_cache()
    doc = {
        "ok": failures == 0 and bool(rows),
        "host": socket.gethostname(),
        "device": torch.cuda.get_device_name(device),
        "arch": arch,
        "sms": sms,
        "ceilings": ceil,
        "sglang_triton": "ran" if peer else peer_reason,
        "timing": f"CUDA-graph replay, CUDA events, L2 flushed before each replay, median of {a.reps}",
        "rows": rows,
        "left_out": left_out,
        "seconds": round(time.time() - t_start, 1),
    }
    return _emit(doc, a, 0 if doc["ok"] else 1)


def _emit(doc: dict, a, code: int) -> int:
    text = json.dumps(doc, indent=1)
    if getattr(a, "out", ""):
        with open(a.out, "w") as f:
            f.write(text)
    return emit(doc, a.json, code, human=_print_rows)


def _print_rows(doc: dict) -> None:
    for r in doc.get("rows", []):
        st = r.get("sglang_triton", {})
        print(
            f"B={r['B']:<2} L={r['L']:<6} n={r['n']} H={r['H']:<2} {r['kv']:<4} {r['config']} S={r['splits']:<3} "
            f"ours/floor={r.get('ours_s', float('nan')) / r['floor_s']:.2f} "
            f"vs_triton={r.get('speedup_vs_sglang_triton', float('nan')):.2f}x "
            f"triton/floor={st.get('s', float('nan')) / r['floor_s']:.2f} "
            f"fp8/bf16={r.get('fp8_over_bf16_time', float('nan')):.2f} "
            f"uniq={r['overlap']['unique_fraction_mean'] or float('nan'):.2f}"
        )
    print(f"left out: {len(doc.get('left_out', []))}")


if __name__ == "__main__":
    sys.exit(main())
