"""Device diagnostic (not shipped, not a test): where the dense wgmma split kernel's time goes, per phase of a KV
tile, from the trace build (csrc/ compiled with -DMLAV_TRACE=1: thread 0 of each warpgroup sums SM cycles per
phase; mla_verify_wgmma.cuh lists the phases). E.g.

    python3 tests/device/dense_trace.py 8:32768:8:16,4:131072:4:16 [--fp8] [--fp8-path f16] [--csrc DIR]
        [--define MLAV_DIAG_NOLOAD=1] [--out F]

Per shape: REPS eager calls, each after an L2 flush (the bench's Timer), then the phase sums of those calls
divided by the tiles they ran: SM cycles per tile and phase, per warpgroup, beside the prologue and epilogue per
CTA and the CTA count; for the warp-specialized kernels also the producer's wait for a free stage and its issue per
tile (row 2; the fp8 kernel's also its wait for Q, Q's conversion and its wait for tile 0, per CTA; since session 47
the fp8 producer's `wait_free_stage` is its wait for a tile's raw rows to land, `wait_empty` its wait for the stage's
tile t - 2 and `issue` the conversion, mla_verify_wgmma_ws_fp8.cuh). ASYM consumers
put the S warpgroup's phases in row 0 (the P write in the exact-step slot) and the V warpgroup's wait for P and its
PV in row 1. Builds before session 46 summed row 0's PV slot negative in ASYM kernels (printed wrapped): ptxas
re-read the clock for the previous mark's value (verify_tools.sass finds such reads; fixed in PhaseTrace, first run
on a GPU in session 47), so that slot's cycles were lost from the row. Cycles are SM clocks of one thread
(clock()), so the phases of a warpgroup add up to its CTA's time, waits included; the trace build's instructions are
part of what it measures (its kernel is compared with the plain build's in the same run: `plain_us` / `trace_us`,
CUDA-graph replays). Writes JSON with --out."""

from __future__ import annotations

import argparse
import json
import sys

PHASES = ("prologue", "wait_barrier1", "s", "softmax_p", "barrier2", "exact_step", "pv", "epilogue")
REPS = 20
TRACE_SLOTS = 10  # per warpgroup row of trace_acc (csrc/mla_verify_wgmma.cuh): 0, 1 consumers, 2 the ws producer


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="dense_trace.py", description=__doc__.splitlines()[0])
    ap.add_argument("shapes", help="B:L:n:H,... (the bench's syntax)")
    ap.add_argument("--fp8", action="store_true", help="the fp8 cache as the bench stores it")
    ap.add_argument("--fp8-path", default="auto", help="mla_verify_fwd's fp8_path (auto, bf16, f16)")
    ap.add_argument("--csrc", default=None, help="another copy of mla_verify's csrc/ (default: the checkout's)")
    ap.add_argument(
        "--define",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a macro for both builds, e.g. MLAV_DIAG_NOLOAD=1 (no KV loads from tile 2 on: wrong output, timing only)",
    )
    ap.add_argument("--out", default=None, help="write the JSON document here")
    a = ap.parse_args(argv)

    import torch

    from mla_verify import _build, mla_verify_fwd
    from mla_verify.api import device_arch
    from mla_verify.inputs import kernel_args, kernel_kwargs, make_inputs
    from verify_tools.bench import Timer, _TreeModule, ab_case, load_tree, parse_shapes

    arch = device_arch(torch.device("cuda"))
    csrc = a.csrc or str(_build.CSRC)
    defines = [f"-D{d}" for d in a.define]
    traced = load_tree(arch, csrc, extra=["-DMLAV_TRACE=1", *defines])
    plain = load_tree(arch, csrc, extra=defines) if a.csrc or defines else None
    props = torch.cuda.get_device_properties(0)
    timer = Timer(torch, getattr(props, "L2_cache_size", 64 * 2**20))
    doc = {
        "fp8": a.fp8,
        "fp8_path": a.fp8_path,
        "csrc": csrc,
        "defines": a.define,
        "reps": REPS,
        "phases": PHASES,
        "rows": [],
    }
    for B, L, n, H in parse_shapes(a.shapes):
        inp = make_inputs(ab_case(B, L, n, H, "fp8" if a.fp8 else "bf16"), "cuda")
        args, kw = kernel_args(inp), dict(kernel_kwargs(inp), tile_config="sm90wg", fp8_path=a.fp8_path)
        row: dict = {"B": B, "L": L, "n": n, "H": H}
        for name, mod in (("plain", plain), ("trace", traced)):
            with _TreeModule(mod):
                fn = lambda a=args, k=kw: mla_verify_fwd(*a, **k)  # noqa: E731
                row[f"{name}_us"], _ = timer.time_graph_or_eager(fn, 3, 30)
        with _TreeModule(traced):
            mla_verify_fwd(*args, **kw)
            torch.cuda.synchronize()
            traced.trace_take()  # drop the warm-up's sums
            for _ in range(REPS):
                timer.flush()
                mla_verify_fwd(*args, **kw)
            torch.cuda.synchronize()
            acc = traced.trace_take()
        for g in range(2):
            v = acc[g * TRACE_SLOTS : (g + 1) * TRACE_SLOTS]
            tiles, ctas = max(1, v[8]), max(1, v[9])
            per_tile = {p: round(v[i + 1] / tiles, 1) for i, p in enumerate(PHASES[1:7])}
            row[f"wg{g}"] = {
                "cycles_per_tile": per_tile,
                "tile_total": round(sum(per_tile.values()), 1),
                "prologue_per_cta": round(v[0] / ctas, 1),
                "epilogue_per_cta": round(v[7] / ctas, 1),
                "tiles_per_cta": round(tiles / ctas, 2),
                "ctas": ctas // REPS,
            }
        v = acc[2 * TRACE_SLOTS : 3 * TRACE_SLOTS]  # the warp-specialized kernel's producer (zero for the others)
        if len(v) == TRACE_SLOTS and v[9] > 0:
            tiles, ctas = max(1, v[8]), v[9]
            row["producer"] = {
                "cycles_per_tile": {"wait_free_stage": round(v[1] / tiles, 1), "issue": round(v[2] / tiles, 1)},
                "prologue_per_cta": round(v[0] / ctas, 1),
                "last_copies_per_cta": round(v[7] / ctas, 1),
            }
            if v[6]:  # the fp8 VLOAD producer: its wait for the stage's tile t - 2 (slot 1: its wait for the landing)
                row["producer"]["cycles_per_tile"]["wait_empty"] = round(v[6] / tiles, 1)
            if any(v[3:6]):  # the fp8 producer's prologue, split (mla_verify_wgmma_ws_fp8.cuh)
                row["producer"]["prologue_split_per_cta"] = {
                    k: round(v[i] / ctas, 1) for i, k in ((3, "wait_q"), (4, "q_to_f16"), (5, "wait_tile0"))
                }
        doc["rows"].append(row)
        print(
            f"[trace] B={B} L={L} n={n} H={H}: plain {row['plain_us']:.1f} us, trace {row['trace_us']:.1f} us; "
            f"wg0 {row['wg0']['cycles_per_tile']} (tile {row['wg0']['tile_total']}, "
            f"{row['wg0']['tiles_per_cta']} tiles/CTA, prologue {row['wg0']['prologue_per_cta']}, "
            f"epilogue {row['wg0']['epilogue_per_cta']})"
            + (f"; producer {row['producer']}" if "producer" in row else ""),
            flush=True,
        )
        if a.out:
            with open(a.out, "w", encoding="utf-8") as fh:
                json.dump(doc, fh, indent=1)
    print(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
