"""Specification of the n8r kernel's in-register fp8 fragments (CfgN REG in
kernels/dsa_verify/csrc/dsa_verify_n8.cuh), checked on the CPU by emulating the PTX instructions
it uses with the kernel's own address formulas:

- ldmatrix.x4 (b16): matrix i takes its 8 row addresses from lanes 8i..8i+7; lane t receives the
  32-bit word at byte 4 (t % 4) of row t / 4 of every matrix (.trans: the b16 pair of column t / 4
  from rows 2 (t % 4) and 2 (t % 4) + 1, low half first);
- cvt.rn.f16x2.e4m3x2 (low byte -> low half), prmt (__byte_perm);
- mma.m16n8k16 fragments: A a0 (row g, k 2c, 2c+1), a1 (row g+8), a2 (row g, k 2c+8, 2c+9), a3;
  B b0 (k 2c, 2c+1, col g), b1 (k 2c+8, 2c+9); C c0..c3 = (g, 2c), (g, 2c+1), (g+8, 2c), (g+8, 2c+1)
  with g = lane / 4, c = lane % 4.
A mapping slip (a wrong pairing, prmt selector or Q16 offset) fails here without a GPU; whether the
CUDA transcribes these formulas is for the GPU parity suite (tests/device/dsa_run.sh, configs n8r).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

FP8_ROW, LANES = 656, 32
QROW16 = 512 * 2 + 64  # bytes of one Q16 row (tiles.QROW16)


def e4m3(byte_values: np.ndarray) -> np.ndarray:
    """float64 values of e4m3 bytes (torch's float8_e4m3fn decoding)."""
    t = torch.from_numpy(byte_values.astype(np.uint8)).view(torch.float8_e4m3fn)
    return t.to(torch.float64).numpy()


def ldsm_x4(mem: np.ndarray, addr_of_lane, trans: bool = False) -> list[list[np.ndarray]]:
    """regs[t][i] = the 4 bytes lane t receives from matrix i (uint8[4], little-endian order)."""
    rows = [[mem[addr_of_lane(8 * i + r) : addr_of_lane(8 * i + r) + 16] for r in range(8)] for i in range(4)]
    regs = []
    for t in range(LANES):
        g, c = t // 4, t % 4
        per = []
        for i in range(4):
            if trans:  # b16 column g of rows 2c and 2c + 1
                per.append(np.concatenate([rows[i][2 * c][2 * g : 2 * g + 2], rows[i][2 * c + 1][2 * g : 2 * g + 2]]))
            else:
                per.append(rows[i][g][4 * c : 4 * c + 4])
        regs.append(per)
    return regs


def byte_perm(x: np.ndarray, selector: int) -> np.ndarray:
    """__byte_perm(x, 0, selector) on a 4-byte word (selector nibbles < 4 pick bytes of x)."""
    return np.array([x[(selector >> (4 * k)) & 7] if ((selector >> (4 * k)) & 7) < 4 else 0 for k in range(4)])


def cvt_pair(word: np.ndarray, half: int) -> np.ndarray:
    """cvt.rn.f16x2.e4m3x2 of the low (half = 0) or high (1) 16 bits: [low value, high value]."""
    return e4m3(word[2 * half : 2 * half + 2])


def mma(a: list, b: list) -> np.ndarray:
    """C [16, 8] of one m16n8k16 from per-lane fragments a[t] = (a0, a1, a2, a3), b[t] = (b0, b1)."""
    A, B = np.zeros((16, 16)), np.zeros((16, 8))
    for t in range(LANES):
        g, c = t // 4, t % 4
        a0, a1, a2, a3 = a[t]
        A[g, 2 * c : 2 * c + 2], A[g + 8, 2 * c : 2 * c + 2] = a0, a1
        A[g, 2 * c + 8 : 2 * c + 10], A[g + 8, 2 * c + 8 : 2 * c + 10] = a2, a3
        B[2 * c : 2 * c + 2, g], B[2 * c + 8 : 2 * c + 10, g] = b[t]
    return A @ B


@pytest.fixture
def tile():
    """16 raw fp8 rows (finite e4m3 bytes; scales and rope left random) and Q [8, 512]."""
    gen = np.random.default_rng(7)
    raw = gen.integers(0, 256, size=16 * FP8_ROW).astype(np.uint8)
    for r in range(16):  # no NaN bytes (0x7f / 0xff) in the nope part
        row = raw[r * FP8_ROW : r * FP8_ROW + 512]
        row[(row & 0x7F) == 0x7F] = 0x3C
    return raw, gen.standard_normal((8, 512))


def q16_rows(q: np.ndarray) -> np.ndarray:
    """Q [8, 512] in the Q16 layout: dim 16 s + 4 c + i at element 32 (s / 2) + 8 c + 4 (s % 2) + i."""
    out = np.zeros((8, QROW16 // 2))
    for d in range(512):
        s, w = d // 16, d % 16
        c, i = w // 4, w % 4
        out[:, 32 * (s // 2) + 8 * c + 4 * (s % 2) + i] = q[:, d]
    return out


def test_s_fragments_give_k_times_q_over_each_segment_pair(tile):
    raw, q = tile
    K = np.stack([e4m3(raw[r * FP8_ROW : r * FP8_ROW + 512]) for r in range(16)])  # [16 tokens, 512]
    q16 = q16_rows(q)
    for kq in range(8):  # as s_kq_reg: segment pairs 4 kq + 2 hp, 4 kq + 2 hp + 1
        acc = np.zeros((16, 8))
        for hp in range(2):
            seg = 4 * kq + 2 * hp

            def addr(lane, seg=seg):
                return ((lane & 7) + ((lane >> 3) & 1) * 8) * FP8_ROW + (seg + (lane >> 4)) * 16

            regs = ldsm_x4(raw, addr)
            for step, (ra, rb) in enumerate(((0, 1), (2, 3))):
                a = [
                    (
                        cvt_pair(regs[t][ra], 0),
                        cvt_pair(regs[t][rb], 0),
                        cvt_pair(regs[t][ra], 1),
                        cvt_pair(regs[t][rb], 1),
                    )
                    for t in range(LANES)
                ]
                b = []
                for t in range(LANES):  # the lane's 16-byte Q16 load: bytes g*QROW16 + 16c + 64(seg/2)
                    g, c = t // 4, t % 4
                    v = q16[g, 32 * (seg // 2) + 8 * c : 32 * (seg // 2) + 8 * c + 8]  # qb.x .. qb.w
                    b.append((v[4 * step : 4 * step + 2], v[4 * step + 2 : 4 * step + 4]))
                acc += mma(a, b)
        dims = slice(64 * kq, 64 * kq + 64)
        np.testing.assert_allclose(acc, K[:, dims] @ q[:, dims].T, rtol=1e-12, atol=1e-9)


def test_pv_fragments_give_v_transposed_times_p_with_rows_at_16i_plus_2g(tile):
    raw, _ = tile
    V = np.stack([e4m3(raw[r * FP8_ROW : r * FP8_ROW + 512]) for r in range(16)])  # [16 tokens, 512]
    P = np.random.default_rng(3).random((16, 8))  # P^T [16 tokens, 8 heads], the B operand
    b = []
    for t in range(LANES):
        g, c = t // 4, t % 4
        b.append((P[2 * c : 2 * c + 2, g], P[2 * c + 8 : 2 * c + 10, g]))
    for i in range(0, 32, 2):  # as the REG PV loop: segments i, i + 1 per ldmatrix.x4.trans

        def addr(lane, i=i):
            return ((lane & 7) + ((lane >> 3) & 1) * 8) * FP8_ROW + (i + (lane >> 4)) * 16

        regs = ldsm_x4(raw, addr, trans=True)
        for seg, (ra, rb) in ((i, (0, 1)), (i + 1, (2, 3))):
            a = []
            for t in range(LANES):
                t0, t1 = byte_perm(regs[t][ra], 0x3120), byte_perm(regs[t][rb], 0x3120)
                a.append((cvt_pair(t0, 0), cvt_pair(t0, 1), cvt_pair(t1, 0), cvt_pair(t1, 1)))
            C = mma(a, b)  # O^T rows of the m-tile
            dims = [16 * seg + 2 * g for g in range(8)] + [16 * seg + 2 * g + 1 for g in range(8)]
            np.testing.assert_allclose(C, V[:, dims].T @ P, rtol=1e-12, atol=1e-9)


def test_q16_layout_fits_its_row_and_covers_every_dim_once():
    slots = [32 * ((d // 16) // 2) + 8 * ((d % 16) // 4) + 4 * ((d // 16) % 2) + d % 4 for d in range(512)]
    assert sorted(slots) == list(range(512)) and max(slots) * 2 + 2 <= QROW16
