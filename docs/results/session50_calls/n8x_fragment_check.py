"""Session 50, CPU only: n8x's new index formulas (kernels/dsa_verify/csrc/dsa_verify_n8.cuh, CfgX) checked against
the PTX fragment layouts of mma.m16n8k16 (bf16). A restatement of the formulas, not a test of the kernel. Run
`python3 docs/results/session50_calls/n8x_fragment_check.py`: it prints "ok".

- C/D fragment: lane (g = lane >> 2, c = lane & 3) holds (row g, col 2c), (g, 2c+1), (g+8, 2c), (g+8, 2c+1).
- B fragment (16 x 8, k x n): b0 holds (k 2c, n g), (k 2c+1, n g); b1 holds (k 2c+8, n g), (k 2c+9, n g).
Checked: (1) P^T published by the S accumulators' lanes at [head][position] (stride PS) and read back as float2 pairs
gives each lane the B fragment of P^T, the values n8's movmatrix.trans gives it; (2) those float2 loads hit 32
distinct banks per half-warp; (3) the output pairing (lanes g and g ^ 1 swap one value) writes every (dim, head) of
an m-tile once, as two consecutive dims.
"""

from __future__ import annotations

PS = 24  # CfgX::PS, floats


def pval(pos: int, head: int) -> int:
    return 1000 * pos + head


def main() -> None:
    smem: dict[int, int] = {}
    for lane in range(32):  # publish: pr = S^T accumulators, rows = positions, cols = heads
        g, c = lane >> 2, lane & 3
        pr = (pval(g, 2 * c), pval(g, 2 * c + 1), pval(g + 8, 2 * c), pval(g + 8, 2 * c + 1))
        addrs = ((2 * c) * PS + g, (2 * c + 1) * PS + g, (2 * c) * PS + g + 8, (2 * c + 1) * PS + g + 8)
        for a, v in zip(addrs, pr):
            assert a not in smem
            smem[a] = v
    for lane in range(32):  # consume: B = P^T [k = position][n = head]
        g, c = lane >> 2, lane & 3
        base = g * PS + 2 * c
        assert (smem[base], smem[base + 1]) == (pval(2 * c, g), pval(2 * c + 1, g)), lane
        assert (smem[base + 8], smem[base + 9]) == (pval(2 * c + 8, g), pval(2 * c + 9, g)), lane
    for half in (0, 1):  # 64-bit loads: one phase per 16 lanes
        banks = []
        for lane in range(16 * half, 16 * half + 16):
            a = (lane >> 2) * PS + 2 * (lane & 3)
            banks += [a % 32, (a + 1) % 32]
        assert len(set(banks)) == 32, sorted(banks)
    for hh in (0, 1):  # output: a = (dim g, head 2c+hh), b = (dim g+8, head 2c+hh) of one m-tile
        written: set[tuple[int, int]] = set()
        for lane in range(32):
            g, c = lane >> 2, lane & 3
            partner = lane ^ 4
            pgl = partner >> 2
            assert partner & 3 == c and pgl == g ^ 1
            a, b = (g, 2 * c + hh), (g + 8, 2 * c + hh)
            recv = (pgl, 2 * c + hh) if pgl & 1 else (pgl + 8, 2 * c + hh)  # the partner sends a if odd, else b
            lo, hi = (recv, b) if g & 1 else (a, recv)
            d = g + (7 if g & 1 else 0)
            assert (lo, hi) == ((d, 2 * c + hh), (d + 1, 2 * c + hh)), lane
            assert lo not in written and hi not in written
            written |= {lo, hi}
        assert written == {(dd, 2 * c + hh) for dd in range(16) for c in range(4)}
    print("ok")


if __name__ == "__main__":
    main()
