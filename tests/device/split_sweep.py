"""Device diagnostic (not shipped, not a test): the dense kernel's time per split count, beside the split rule's
own choice, on the checkout's shipped kernel. Does the rule (api.choose_num_splits, tuned on the v4 kernel with fp32
partials) still pick the fastest count now that B=1 writes bf16 partials through the staged epilogue? E.g.

    python3 tests/device/split_sweep.py 1:4096:8:16,1:32768:8:16 --splits 17,22,33,44,66 [--kv fp8] [--out F]

Per shape: the bench's inputs (verify_tools.bench.ab_case), CUDA-graph replays after an L2 flush (the bench's Timer),
each count's time as the minimum of ROUNDS medians taken in alternation with the rule's own count; `over_auto` =
time / the rule's time; `rel_diff_vs_auto` = |o - o_auto| / |o_auto| (a different split count changes the fp32
summation order, not the result beyond rounding). Writes JSON with --out."""

from __future__ import annotations

import argparse
import json
import sys

ROUNDS = 3


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="split_sweep.py", description=__doc__.splitlines()[0])
    ap.add_argument("shapes", help="B:L:n:H,... (the bench's syntax)")
    ap.add_argument("--splits", required=True, help="split counts to time beside the rule's, e.g. 17,33,66")
    ap.add_argument("--kv", choices=("bf16", "fp8"), default="bf16")
    ap.add_argument("--csrc", default=None, help="another copy of mla_verify's csrc/ to run (default: the checkout's)")
    ap.add_argument("--out", default=None, help="write the JSON document here")
    a = ap.parse_args(argv)
    try:
        counts = sorted({int(x) for x in a.splits.split(",") if x})
    except ValueError:
        ap.error(f"--splits: want integers, got {a.splits!r}")

    import torch

    from mla_verify import api, mla_verify_fwd
    from verify_tools.bench import Timer, _TreeModule, load_tree, parse_shapes

    props = torch.cuda.get_device_properties(0)
    timer = Timer(torch, getattr(props, "L2_cache_size", 64 * 2**20))
    doc = {
        "device": torch.cuda.get_device_name(0),
        "sms": props.multi_processor_count,
        "arch": api.device_arch(torch.device("cuda")),
        "kv": a.kv,
        "csrc": a.csrc,
        "rounds": ROUNDS,
        "rows": [],
    }
    tree = load_tree(doc["arch"], a.csrc) if a.csrc else None
    with _TreeModule(tree):
        for shape in parse_shapes(a.shapes):
            sweep_shape(torch, api, mla_verify_fwd, timer, shape, counts, a.kv, doc)
            if a.out:
                with open(a.out, "w", encoding="utf-8") as fh:
                    json.dump(doc, fh, indent=1)
    return 0


def sweep_shape(torch, api, mla_verify_fwd, timer, shape, counts, kv, doc) -> None:
    """One shape's row of doc: every count's time and output beside the rule's own (module docstring)."""
    from mla_verify.inputs import kernel_args, kernel_kwargs, make_inputs
    from verify_tools.bench import ab_case, min_interleaved

    B, L, n, H = shape
    inp = make_inputs(ab_case(B, L, n, H, kv), "cuda")
    args, kw = list(kernel_args(inp)), kernel_kwargs(inp)
    outs, runs = {}, {}
    for s in [None, *(c for c in counts if c <= api.MAX_SPLITS)]:
        key = "auto" if s is None else s

        def call(s=s):
            mla_verify_fwd(*args, **kw, num_splits=s)

        runs[key], _ = timer.replay_or_eager(call)
        call()
        torch.cuda.synchronize()
        outs[key] = inp["o_extend"].float().clone()
    best = min_interleaved({k: (lambda r=r: timer.median_us(r)) for k, r in runs.items()}, ROUNDS)
    arch, sms = api.device_info(inp["q_extend"].device)
    cfg = api.tiles.DEFAULT_CONFIG[arch]
    auto_s = api.choose_num_splits(B, n, H, B * L, sms, cfg, api.tiles.ctas_per_sm(cfg, arch))
    ref = outs["auto"]
    row = {
        "B": B,
        "L": L,
        "n": n,
        "H": H,
        "auto_splits": auto_s,
        "us": {str(k): round(v, 3) for k, v in best.items()},
        "over_auto": {str(k): round(v / best["auto"], 4) for k, v in best.items()},
        "rel_diff_vs_auto": {str(k): float((o - ref).norm() / ref.norm()) for k, o in outs.items() if k != "auto"},
    }
    doc["rows"].append(row)
    print(f"[sweep] B={B} L={L} n={n} H={H} auto S={auto_s}: {row['over_auto']} ({row['us']})", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
