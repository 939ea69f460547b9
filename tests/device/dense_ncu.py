"""Device diagnostic (not shipped, not a test): run one dense MLA verify call on one bench shape so
that Nsight Compute can profile its split kernel, e.g.

    ncu --clock-control none -k regex:split --launch-skip 2 --launch-count 1 \
        python3 tests/device/dense_ncu.py 8:32768:8:16 sm90wg [CSRC_DIR]

Arguments: B:L:n:H (the bench's shape syntax), a tile config name, and optionally another copy of
mla_verify's csrc/ (JIT-built like bench --tree-ab: an older commit's, or a diagnostic variant). The
call is made three times (the first two are warm-ups) on the bench's synthetic chain inputs."""

from __future__ import annotations

import sys


def main() -> int:
    import torch

    from mla_verify import mla_verify_fwd
    from mla_verify.api import device_arch
    from mla_verify.inputs import CaseSpec, kernel_args, make_inputs
    from verify_tools.bench import _TreeModule, load_tree, parse_shapes

    (B, L, n, H), cfg = parse_shapes(sys.argv[1])[0], sys.argv[2]
    mod = load_tree(device_arch(torch.device("cuda")), sys.argv[3]) if len(sys.argv) > 3 else None
    inp = make_inputs(CaseSpec("ncu", (L,) * B, (n,) * B, H, tree="chain", poison=False, seed=L + B), "cuda")
    args = kernel_args(inp)
    with _TreeModule(mod):
        for _ in range(3):
            mla_verify_fwd(*args, sm_scale=inp["sm_scale"], tile_config=cfg)
    torch.cuda.synchronize()
    print("ran", sys.argv[1:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
