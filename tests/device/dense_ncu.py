"""Device diagnostic (not shipped, not a test): run one dense MLA verify call on one bench shape so
that Nsight Compute can profile its split kernel, e.g.

    ncu --clock-control none -k regex:split --launch-skip 2 --launch-count 1 \
        python3 tests/device/dense_ncu.py 8:32768:8:16 sm90wg [CSRC_DIR]

Arguments: B:L:n:H (the bench's shape syntax), a tile config name, and optionally another copy of
mla_verify's csrc/ (JIT-built like bench --tree-ab: an older commit's, or a diagnostic variant);
`--fp8` anywhere: the cache as the bench's fp8 rows store it. The call is made three times (the first
two are warm-ups) on the bench's synthetic chain inputs."""

from __future__ import annotations

import sys


def main() -> int:
    import torch

    from mla_verify import mla_verify_fwd
    from mla_verify.api import device_arch
    from mla_verify.inputs import kernel_args, kernel_kwargs, make_inputs
    from verify_tools.bench import _TreeModule, ab_case, load_tree, parse_shapes

    argv = [x for x in sys.argv[1:] if x != "--fp8"]
    (B, L, n, H), cfg = parse_shapes(argv[0])[0], argv[1]
    mod = load_tree(device_arch(torch.device("cuda")), argv[2]) if len(argv) > 2 else None
    inp = make_inputs(ab_case(B, L, n, H, "fp8" if "--fp8" in sys.argv else "bf16"), "cuda")
    args = kernel_args(inp)
    with _TreeModule(mod):
        for _ in range(3):
            mla_verify_fwd(*args, **kernel_kwargs(inp), tile_config=cfg)
    torch.cuda.synchronize()
    print("ran", sys.argv[1:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
