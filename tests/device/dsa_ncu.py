"""Device diagnostic (not shipped, not a test): run one DSA verify split kernel on one bench shape
so that Nsight Compute can profile it, e.g.

    ncu --clock-control none -k regex:dsa_verify --launch-skip 2 --launch-count 1 \
        python3 tests/device/dsa_ncu.py 32:32768:8:8 fp8 n8r

Arguments: B:L:n:H (the bench's shape syntax), bf16|fp8, a tile config name. The call is made
three times (the first two are warm-ups) with the bench's synthetic inputs (dsa_verify.inputs).
Experimental configs load the experimental JIT build, as in the bench."""

from __future__ import annotations

import sys


def main() -> int:
    import torch

    from dsa_verify.api import dsa_verify_fwd, workspace_numel_for
    from dsa_verify.inputs import DsaCase, make_inputs
    from dsa_verify.layout import quantize_cache
    from verify_tools.bench import parse_shapes
    from verify_tools.dsa_bench import SM_SCALE

    (B, L, n, H), kvname, cfg = parse_shapes(sys.argv[1])[0], sys.argv[2], sys.argv[3]
    device = torch.device("cuda")
    d = make_inputs(DsaCase("ncu", (L,) * B, n, H, seed=B * 7 + n, poison=False), device)
    q, pt, sl, kv = d["q_all"], d["page_table_1"], d["seq_lens"], d["kv_cache"]
    if kvname == "fp8":
        kv = quantize_cache(kv)
    out = torch.empty(q.shape[0], H, 512, dtype=torch.bfloat16, device=device)
    ws = torch.empty(max(1, workspace_numel_for(q, kv, pt, cfg)), dtype=torch.float32, device=device)
    for _ in range(3):
        dsa_verify_fwd(q, kv, pt, sl, SM_SCALE, out=out, workspace=ws, tile_config=cfg)
    torch.cuda.synchronize()
    print("ran", sys.argv[1:], "T =", q.shape[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
