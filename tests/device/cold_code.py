"""Device diagnostic (not shipped, not a test): what a cold instruction stream costs the verify kernels. E.g.

    python3 tests/device/cold_code.py 1:4096:8:16,1:32768:8:16 [--tree NAME=CSRC_DIR ...] [--kv fp8] [--out F]
    python3 tests/device/cold_code.py 1:32768:4:8,1:32768:4:64 --dsa [--dsa-kv bf16,fp8] [--out F]

The bench flushes L2 before every timed replay, which evicts the kernels' code as well as the KV cache, so every
SM fetches its instructions from DRAM again. Per tree ("cur" = the checkout, plus each --tree) and shape, two CUDA
graphs are captured on separate inputs of the same shape (the timed call's, and a warm-up call's with another
seed; --kv fp8: the dense cache as the bench's fp8 rows, so the graph path's fp8 kernel), then, interleaved over
REPS rounds of ITERS replays each:
  cold : L2 flush; [start event] timed replay [end event]             (the bench's own number)
  warm : L2 flush; warm-up replay; [start event] timed replay [end event]
The warm-up replay runs the same kernels and code paths on other buffers, so the timed call finds its code in L2
(and whatever instruction caches kept it) and its own KV, Q and indices still cold. cold - warm is the cold-code
cost (plus whatever launch state the warm-up leaves behind), in µs, median of each mode (bench.Timer.median_us,
the warm-up as its `pre`), min over rounds. A tree whose kernel holds more code than it runs (session 22 call 4's
combined kernel) shows whether its constant loss is that cost. --dsa times the sparse kernel (dsa_verify_fwd, auto plan, the checkout's build) instead, per KV dtype
(shape B:L:n:H as dsa_bench's: B requests of prefix L, n draft rows each, H heads). --graph-buffer (dense): per tree two
more sides, "NAME/gb" (the bench's graph-buffer mode: one capture on max-sized index/mask buffers for a context of
GB_CTX tokens per request, rewritten in place to prefix L, so the device split rule runs) and "NAME/exact" (exact-length
buffers, eager-equivalent launch), each with its own warm-up graph on other inputs: whether the graph-buffer row's
gap (session 29: the device rule) is the first fetch of the rule's code after the flush. Writes JSON with --out."""

from __future__ import annotations

import argparse
import json
import sys

REPS = 3
ITERS = 30
GB_CTX = 131072  # --graph-buffer: the capture's context per request (the bench's max(GRAPH_BUFFER_LENS))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="cold_code.py", description=__doc__.splitlines()[0])
    ap.add_argument("shapes", help="B:L:n:H,... (the bench's syntax)")
    ap.add_argument("--tree", action="append", default=[], metavar="NAME=CSRC_DIR", help="another csrc/ copy")
    ap.add_argument("--dsa", action="store_true", help="the sparse kernel (dsa_verify) instead of the dense one")
    ap.add_argument("--dsa-kv", default="bf16,fp8", help="--dsa: KV dtypes to time (bf16, fp8)")
    ap.add_argument("--kv", default="bf16", choices=("bf16", "fp8"), help="dense: the KV cache dtype")
    ap.add_argument("--graph-buffer", action="store_true", help="dense: max-sized-buffer replays beside exact ones")
    ap.add_argument("--out", default=None, help="write the JSON document here")
    a = ap.parse_args(argv)

    import dataclasses

    import torch

    from verify_tools.bench import Timer, parse_shapes

    props = torch.cuda.get_device_properties(0)
    timer = Timer(torch, getattr(props, "L2_cache_size", 64 * 2**20))
    doc: dict = {"trees": a.tree, "dsa": a.dsa, "kv": None if a.dsa else a.kv, "reps": REPS, "iters": ITERS, "rows": []}

    if a.dsa:
        from dsa_verify.api import dsa_verify_fwd, workspace_numel_for
        from dsa_verify.inputs import DsaCase
        from dsa_verify.inputs import make_inputs as dsa_inputs
        from dsa_verify.layout import quantize_cache

        def dsa_call(d, kv):
            cache = d["kv_cache"] if kv == "bf16" else quantize_cache(d["kv_cache"])
            q, pt, sl = d["q_all"], d["page_table_1"], d["seq_lens"]
            out = torch.empty(q.shape[0], q.shape[1], 512, dtype=torch.bfloat16, device="cuda")
            ws = torch.empty(max(1, workspace_numel_for(q, cache, pt, "auto", None, "auto")), device="cuda")
            return lambda: dsa_verify_fwd(q, cache, pt, sl, d["sm_scale"], out=out, workspace=ws)

        def graphs_of(B, L, n, H) -> dict:
            spec = DsaCase("cold", (L,) * B, n, H, seed=L + B, poison=False)
            mains = dsa_inputs(spec, "cuda")
            warms = dsa_inputs(dataclasses.replace(spec, seed=spec.seed + 7919), "cuda")
            return {
                kv: (timer.graph(dsa_call(mains, kv)).replay, timer.graph(dsa_call(warms, kv)).replay)
                for kv in a.dsa_kv.split(",")
            }

    else:
        from mla_verify import mla_verify_fwd
        from mla_verify.api import device_arch
        from mla_verify.inputs import kernel_args, kernel_kwargs, make_inputs
        from verify_tools.bench import _TreeModule, ab_case, load_tree

        arch = device_arch(torch.device("cuda"))
        trees = {"cur": None}
        for spec in a.tree:
            name, _, path = spec.partition("=")
            trees[name] = load_tree(arch, path)

        def graphs_of(B, L, n, H) -> dict:
            spec = ab_case(B, L, n, H, a.kv)
            pair = (make_inputs(spec, "cuda"), make_inputs(dataclasses.replace(spec, seed=spec.seed + 7919), "cuda"))
            graphs = {}
            for name, mod in trees.items():
                with _TreeModule(mod):
                    graphs[name] = tuple(
                        timer.graph(
                            lambda i=inp: mla_verify_fwd(*kernel_args(i), **kernel_kwargs(i), tile_config="sm90wg")
                        ).replay
                        for inp in pair
                    )
            if a.graph_buffer:
                for name, mod in trees.items():
                    with _TreeModule(mod):
                        sides = [gb_pair(B, L, n, H, seed) for seed in (7 + B, 7 + B + 7919)]
                    graphs[name + "/gb"] = (sides[0][0], sides[1][0])
                    graphs[name + "/exact"] = (sides[0][1], sides[1][1])
            return graphs

        def gb_pair(B, L, n, H, seed):
            """(replay of a capture on max-sized buffers rewritten to prefix L, replay of the exact-length call),
            both on one input set (bench_graph_buffer's layout: chain drafts, mask rows of L + n)."""
            from mla_verify.inputs import CaseSpec

            inp = make_inputs(
                CaseSpec("gbc", (GB_CTX,) * B, (n,) * B, H, tree="chain", poison=False, seed=seed), "cuda"
            )
            dev = inp["q_extend"].device
            blk = torch.ones(n, L + n, dtype=torch.uint8, device=dev)
            blk[:, L:] = torch.tril(torch.ones(n, n, dtype=torch.uint8, device=dev))
            ex = (
                torch.arange(0, B + 1, dtype=torch.int32, device=dev) * L,
                inp["kv_indices"].view(B, GB_CTX)[:, :L].reshape(-1).contiguous(),
                blk.flatten().repeat(B),
                torch.arange(0, B + 1, dtype=torch.int64, device=dev) * (n * (L + n)),
            )
            gb = (
                ex[0].clone(),
                torch.zeros(B * n * GB_CTX, dtype=torch.int64, device=dev),
                torch.zeros(B * n * (GB_CTX + n), dtype=torch.uint8, device=dev),
                ex[3].clone(),
            )
            gb[1][: ex[1].numel()].copy_(ex[1])
            gb[2][: ex[2].numel()].copy_(ex[2])

            def call(bufs):
                args = list(kernel_args(inp))
                args[3], args[7], args[8], args[9], args[11] = torch.empty_like(inp["o_extend"]), *bufs
                return lambda: mla_verify_fwd(*args, sm_scale=inp["sm_scale"])

            return timer.graph(call(gb)).replay, timer.graph(call(ex)).replay

    for B, L, n, H in parse_shapes(a.shapes):
        graphs = graphs_of(B, L, n, H)
        res: dict = {k: {"cold": [], "warm": []} for k in graphs}
        for _ in range(REPS):
            for name, (main_run, warm_run) in graphs.items():
                main_run()
                warm_run()
                res[name]["cold"].append(timer.median_us(main_run, 0, ITERS))
                res[name]["warm"].append(timer.median_us(main_run, 0, ITERS, pre=warm_run))
        row = {"B": B, "L": L, "n": n, "H": H, "trees": {}}
        for name, r in res.items():
            cold, warm = min(r["cold"]), min(r["warm"])
            row["trees"][name] = {
                "cold_us": round(cold, 3),
                "warm_code_us": round(warm, 3),
                "cold_minus_warm_us": round(cold - warm, 3),
                "runs": r,
            }
        doc["rows"].append(row)
        print(
            f"[cold] B={B} L={L} n={n} H={H}: "
            + "; ".join(
                f"{k} cold {v['cold_us']:.2f} warm-code {v['warm_code_us']:.2f} (diff {v['cold_minus_warm_us']:.2f})"
                for k, v in row["trees"].items()
            ),
            flush=True,
        )
        if a.out:
            with open(a.out, "w", encoding="utf-8") as fh:
                json.dump(doc, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
