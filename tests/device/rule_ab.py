"""Device diagnostic (not shipped, not a test): the split rule's weight A/B where SGLang runs the kernel, CUDA graphs
captured on max-sized index buffers (verify_tools.bench's graph-buffer mode), in one process. E.g.

    python3 tests/device/rule_ab.py --weights 0,54 --rounds 2 [--out F]

For each weight (tiles.SM90WG.split_tile_weight; 0 = the plain critical-tile rule) and each case, the bench's
graph-buffer rows (graph replay on max-sized buffers and the exact-length call, each the min of interleaved medians,
L2 flushed); the weights alternate `rounds` times and each row keeps its minimum over rounds. Prints per case and
length each weight's replay and exact times over the first weight's. Writes JSON with --out."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

CASES = ((1, 8, 16, (2048, 4096, 6144, 131072)), (4, 4, 16, (2048, 4096, 32768)))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="rule_ab.py", description=__doc__.splitlines()[0])
    ap.add_argument("--weights", default="0,54", help="split_tile_weight values, the first is the reference")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    weights = [int(w) for w in a.weights.split(",")]

    import torch

    from mla_verify import tiles
    from verify_tools.bench import Timer, bench_graph_buffer

    props = torch.cuda.get_device_properties(0)
    timer = Timer(torch, getattr(props, "L2_cache_size", 64 * 2**20))
    shipped = tiles.SM90WG
    best: dict = {}
    try:
        for _ in range(a.rounds):
            for w in weights:
                cfg = dataclasses.replace(shipped, split_tile_weight=w)
                tiles.DEFAULT_CONFIG["sm_90a"] = tiles.CONFIGS["sm90wg"] = cfg
                for B, n, H, lens in CASES:
                    for r in bench_graph_buffer(torch, timer, B, n, H, lens):
                        key = (w, B, n, H, r["L"])
                        old = best.get(key)
                        best[key] = {
                            "graph_us": min(r["graph_buffer_us"], old["graph_us"]) if old else r["graph_buffer_us"],
                            "exact_us": min(r["exact_us"], old["exact_us"]) if old else r["exact_us"],
                            "splits_grid": r["splits_graph_buffer"],
                            "splits_effective": r["splits_effective"],
                            "bitwise": r["replay_equal_exact_bitwise"] and (old["bitwise"] if old else True),
                        }
    finally:
        tiles.DEFAULT_CONFIG["sm_90a"] = tiles.CONFIGS["sm90wg"] = shipped
    rows = []
    for (w, B, n, H, L), v in best.items():
        ref = best[(weights[0], B, n, H, L)]
        row = {"weight": w, "B": B, "n": n, "H": H, "L": L, **v}
        row["graph_over_ref"] = round(v["graph_us"] / ref["graph_us"], 4)
        row["exact_over_ref"] = round(v["exact_us"] / ref["exact_us"], 4)
        rows.append(row)
        print(
            f"[rule] w={w} B={B} n={n} H={H} L={L}: S {v['splits_effective']}/{v['splits_grid']} graph {v['graph_us']:.2f}us "
            f"({row['graph_over_ref']}) exact {v['exact_us']:.2f}us ({row['exact_over_ref']}) bitwise {v['bitwise']}"
        )
    if a.out:
        with open(a.out, "w", encoding="utf-8") as fh:
            json.dump({"device": torch.cuda.get_device_name(0), "weights": weights, "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
