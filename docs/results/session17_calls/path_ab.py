"""Session 17: fp8 time of the wgmma kernel's two fp8 paths (fp8_path "bf16" / "f16", same build, same process;
graph replays, L2 flushed, min of 3 interleaved medians of 30) and the auto choice, per shape; writes JSON."""

import json
import sys

import torch

from mla_verify import mla_verify_fwd
from mla_verify.inputs import kernel_kwargs, make_inputs
from verify_tools.bench import Timer, ab_case, kernel_args, parse_shapes

shapes = parse_shapes(sys.argv[1])
out = {"rows": []}
timer = Timer(torch, 2 * 60 * 2**20)
for B, L, n, H in shapes:
    inp = make_inputs(ab_case(B, L, n, H, "fp8"), "cuda")
    a = list(kernel_args(inp))
    kw = kernel_kwargs(inp)
    t = {k: [] for k in ("bf16", "f16", "auto")}
    o = {}
    for _ in range(3):
        for k in t:
            us, _ = timer.time_graph_or_eager(
                lambda k=k, a=a, kw=kw: mla_verify_fwd(*a, **kw, tile_config="sm90wg", fp8_path=k),
                3,
                30,
            )
            t[k].append(us)
            o[k] = inp["o_extend"].clone()
    mn = {k: round(min(v), 3) for k, v in t.items()}
    row = {
        "B": B,
        "L": L,
        "n": n,
        "H": H,
        "us": mn,
        "f16_over_bf16": round(mn["f16"] / mn["bf16"], 4),
        "auto_over_bf16": round(mn["auto"] / mn["bf16"], 4),
        "auto_equals": [k for k in ("bf16", "f16") if torch.equal(o["auto"], o[k])],
        "runs": t,
    }
    out["rows"].append(row)
    print(
        f"B={B} L={L} n={n} H={H}: {mn} f16/bf16 {row['f16_over_bf16']} auto/bf16 {row['auto_over_bf16']} auto=="
        + ",".join(row["auto_equals"]),
        flush=True,
    )
    json.dump(out, open(sys.argv[2], "w"), indent=1)
