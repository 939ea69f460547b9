"""Session 50, CPU only: a float64 model of n8x's softmax bookkeeping (kernels/dsa_verify/csrc/dsa_verify_n8.cuh,
CfgX), one head, against the plain softmax of the same scores. Not a test of the kernel: no fragment layouts, no
rounding. Run `python3 docs/results/session50_calls/n8x_softmax_model.py`: it prints "ok" after 4 and 8 warps, 1-5
tiles, warps and tiles with no visible position, and a split with none at all.

The model follows the kernel's order of operations (scores in log2 units, -inf where an entry is not used):
- each warp w keeps a running max m_w and sum l_w over its 16 positions of every tile and publishes its P (relative
  to m_w, or to 0 while m_w = -inf) and m_w;
- every consumer takes M = max_w m_w (`use` = 0 while M = -inf), rescales O by exp2(M_old - use) and adds
  sum_w V_w^T (P_w * exp2(m_w - use));
- at the end L = sum_w l_w * exp2(m_w - use), out = O / L (0 where L = 0), lse2 = use + log2(L) (-inf where L = 0).
"""

from __future__ import annotations

import numpy as np

RNG = np.random.default_rng(0)
ROWS = 16  # positions per warp tile
DV = 8  # value dims of the model


def exp2(x):
    with np.errstate(invalid="ignore", over="ignore"):
        return np.exp2(x)


def n8x_split(sv: np.ndarray, v: np.ndarray, warps: int, ntiles: int) -> tuple[np.ndarray, float]:
    """out [DV], lse2 of one head over one split, as the kernel's warps and consumers compute them."""
    m_run = np.full(warps, -np.inf)
    l_run = np.zeros(warps)
    mx_run, mx_use = -np.inf, 0.0
    o = np.zeros(DV)
    for j in range(ntiles):
        published = []
        for w in range(warps):
            rows = slice((j * warps + w) * ROWS, (j * warps + w + 1) * ROWS)
            m_new = max(m_run[w], sv[rows].max())
            m_use = 0.0 if m_new == -np.inf else m_new
            alpha = exp2(m_run[w] - m_use)
            m_run[w] = m_new
            pr = exp2(sv[rows] - m_use)
            l_run[w] = l_run[w] * alpha + pr.sum()
            published.append((pr, m_new, rows))
        mg = max(m for _, m, _ in published)
        use = 0.0 if mg == -np.inf else mg
        o = o * exp2(mx_run - use)
        mx_run, mx_use = mg, use
        for pr, m_w, rows in published:
            o = o + (pr * exp2(m_w - use)) @ v[rows]
    big_l = sum(l_run[w] * exp2(m_run[w] - mx_use) for w in range(warps))
    out = o * (1.0 / big_l if big_l > 0 else 0.0)
    return out, (mx_use + np.log2(big_l) if big_l > 0 else -np.inf)


def check(ntiles: int, warps: int, mask_p: float = 0.3, empty: tuple = (), dead: bool = False) -> None:
    n = ntiles * warps * ROWS
    s = RNG.normal(size=n) * 4 - 50
    v = RNG.normal(size=(n, DV))
    used = RNG.random(n) > mask_p
    for j, w in empty:  # (tile, warp) pairs with no visible position
        used[(j * warps + w) * ROWS : (j * warps + w + 1) * ROWS] = False
    if dead:
        used[:] = False
    sv = np.where(used, s, -np.inf)
    out, lse2 = n8x_split(sv, v, warps, ntiles)
    if used.any():
        mref = sv.max()
        p = exp2(sv - mref)
        ref, ref_lse2 = (p @ v) / p.sum(), mref + np.log2(p.sum())
    else:
        ref, ref_lse2 = np.zeros(DV), -np.inf
    assert np.all(np.isfinite(out)), out
    assert np.allclose(out, ref, rtol=1e-12, atol=1e-12), (out, ref)
    assert lse2 == ref_lse2 or abs(lse2 - ref_lse2) < 1e-9, (lse2, ref_lse2)


def main() -> None:
    for warps in (4, 8):
        for nt in (1, 2, 3, 5):
            for _ in range(50):
                check(nt, warps)
            check(nt, warps, empty=tuple((0, w) for w in range(warps - 1)))
            check(nt, warps, empty=tuple((j, w) for j in range(nt) for w in range(warps - 1)))
            check(nt, warps, empty=tuple((0, w) for w in range(warps)))
            check(nt, warps, dead=True)
            check(nt, warps, mask_p=0.97)
    print("ok")


if __name__ == "__main__":
    main()
