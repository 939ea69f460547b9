"""Specification of the warp-specialized dense kernel's fp8 producer (FP8 = true in
kernels/mla_verify/csrc/mla_verify_wgmma_ws.cuh: WsFp8Rows, ws_issue_tile_fp8, ws_decode_fp8), checked on the
CPU by emulating one KV stage's shared memory with the kernel's own address formulas:

- tile_off(r, ch): 16-byte chunk ch (0..71, dims 8 ch .. 8 ch + 7 in bf16) of row r (0..63) at
  (ch >> 3) * 8192 + r * 128 + (((ch & 7) ^ (r & 7)) << 4), the layout the consumers' wgmmas read;
- producer thread pt (0..127) holds rows l8 + 16 i (l8 = pt >> 3, i < 4) and, per row, the raw fp8 pieces
  q = sub8 + 8 k (sub8 = pt & 7, k < 5, q < 36): piece q (row bytes 16 q .. 16 q + 15) lands at chunk 36 + q
  and decodes to chunks 2 q and 2 q + 1;
- per row, every lane of a warp reads its pieces, then (after __syncwarp) writes its chunks; warps run in any
  order relative to each other. In place is safe because a row's raw pieces lie in that row's own smem lines,
  which only the warp holding the row touches, and that warp reads all of them before it writes any;
- fp8x2_to_bf16x2 (mla_verify_kernel.cuh): prmt to the top byte of each 16-bit lane, (u & 0x80008000) |
  ((u >> 4) & 0x07F007F0), times bf16 2^120.
A layout slip (a raw piece overwritten before it is read, a chunk written twice or not at all, a wrong decode)
fails here without a GPU; whether the CUDA transcribes these formulas is for the GPU parity suite.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

ATOM, ROWS, CHUNKS, PIECES = 8192, 64, 72, 36


def tile_off(r: int, ch: int) -> int:
    return (ch >> 3) * ATOM + r * 128 + (((ch & 7) ^ (r & 7)) << 4)


def rows_of(pt: int) -> list[int]:
    return [(pt >> 3) + 16 * i for i in range(4)]


def pieces_of(pt: int) -> list[int]:
    return [q for q in ((pt & 7) + 8 * k for k in range(5)) if q < PIECES]


def bf16_of_e4m3(b: np.ndarray) -> np.ndarray:
    """uint16 bf16 bits of e4m3 bytes by the kernel's integer decode (fp8x2_to_bf16x2), one value per byte."""
    u = b.astype(np.uint32) << 8  # the byte at the top of its 16-bit lane
    bits = (u & 0x8000) | ((u >> 4) & 0x07F0)
    x = torch.from_numpy(bits.astype(np.uint16).view(np.int16)).view(torch.bfloat16)
    return (x * torch.tensor(2.0**120, dtype=torch.bfloat16)).view(torch.int16).numpy().view(np.uint16)


def bf16_bits_exact(b: np.ndarray) -> np.ndarray:
    t = torch.from_numpy(b.astype(np.uint8)).view(torch.float8_e4m3fn).to(torch.float64)
    return t.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)


class Stage:
    """One KV stage's bytes plus, per byte, the raw piece (row, q) still to be read there (-1: none)."""

    def __init__(self) -> None:
        self.mem = np.full(9 * ATOM, 0xAA, dtype=np.uint8)
        self.owner = np.full(9 * ATOM, -1, dtype=np.int64)

    def land(self, r: int, q: int, src: np.ndarray, raw_at) -> None:
        a = tile_off(*raw_at(r, q))
        self.mem[a : a + 16] = src
        self.owner[a : a + 16] = r * PIECES + q

    def read(self, r: int, q: int, raw_at) -> np.ndarray:
        a = tile_off(*raw_at(r, q))
        assert (self.owner[a : a + 16] == r * PIECES + q).all(), f"raw piece {q} of row {r} overwritten before read"
        self.owner[a : a + 16] = -1
        return self.mem[a : a + 16].copy()

    def write(self, r: int, ch: int, vals: np.ndarray) -> None:
        a = tile_off(r, ch)
        assert (self.owner[a : a + 16] == -1).all(), f"chunk {ch} of row {r} overwrites an unread raw piece"
        self.mem[a : a + 16] = vals.view(np.uint8)


def raw_in_own_row(r: int, q: int) -> tuple[int, int]:
    """Where the kernel lands raw piece q of row r: chunk 36 + q of the same row (WsFp8Rows.raw0)."""
    return r, 36 + q


def run_producer(rows: np.ndarray, raw_at, seed: int) -> Stage:
    """The producer's landing and decode of one tile (rows: uint8 [64, 576]): the four warps' row steps
    interleaved at random, each warp's rows in program order (i = 0..3)."""
    rng = np.random.default_rng(seed)
    st = Stage()
    for pt in range(128):  # cp.async: every landing precedes the decode of its row (each lane waits for its own)
        for r in rows_of(pt):
            for q in pieces_of(pt):
                st.land(r, q, rows[r, 16 * q : 16 * q + 16], raw_at)
    left = [4, 4, 4, 4]  # row steps left per warp
    while any(left):
        warp = int(rng.choice([w for w in range(4) if left[w]]))
        i = 4 - left[warp]
        left[warp] -= 1
        lanes = [pt for pt in range(32 * warp, 32 * warp + 32)]
        got = {}
        for pt in rng.permutation(lanes):  # every lane's reads of this row ...
            r = rows_of(int(pt))[i]
            for q in pieces_of(int(pt)):
                got[(int(pt), q)] = st.read(r, q, raw_at)
        for pt in rng.permutation(lanes):  # ... then (__syncwarp) its writes
            r = rows_of(int(pt))[i]
            for q in pieces_of(int(pt)):
                dec = bf16_of_e4m3(got[(int(pt), q)])
                st.write(r, 2 * q, dec[:8])
                st.write(r, 2 * q + 1, dec[8:])
    return st


def random_fp8_rows(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    b = rng.integers(0, 256, size=(ROWS, 576), dtype=np.uint8)
    b[(b & 0x7F) == 0x7F] = 0x3C  # the two NaN codes are never stored by SGLang's fp8 cache
    return b


def test_every_piece_is_copied_once_and_every_chunk_written_once():
    landed = np.zeros((ROWS, PIECES), dtype=int)
    for pt in range(128):
        for r in rows_of(pt):
            for q in pieces_of(pt):
                landed[r, q] += 1
    assert (landed == 1).all()
    offs = {tile_off(r, ch) for r in range(ROWS) for ch in range(CHUNKS)}
    assert len(offs) == ROWS * CHUNKS and max(offs) + 16 <= 9 * ATOM  # a bijection onto the stage


def test_the_integer_decode_is_exact_for_every_finite_e4m3_value():
    b = np.array([v for v in range(256) if (v & 0x7F) != 0x7F], dtype=np.uint8)
    assert (bf16_of_e4m3(b) == bf16_bits_exact(b)).all()
    assert (bf16_of_e4m3(np.array([0x7F, 0xFF], dtype=np.uint8)).view(np.int16) != 0).all()  # +-480, never +-0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_in_place_decode_leaves_the_bf16_tile_the_consumers_read(seed):
    rows = random_fp8_rows(seed)
    st = run_producer(rows, raw_in_own_row, seed)
    want = bf16_bits_exact(rows)  # [64, 576] bf16 bits
    for r in range(ROWS):
        for ch in range(CHUNKS):
            a = tile_off(r, ch)
            assert (st.mem[a : a + 16].view(np.uint16) == want[r, 8 * ch : 8 * ch + 8]).all(), (r, ch)


def test_a_zero_filled_row_decodes_to_zeros():
    rows = random_fp8_rows(3)
    rows[5] = 0  # an unreadable slot: cp.async copies 0 bytes, the raw row is zero-filled
    st = run_producer(rows, raw_in_own_row, 3)
    assert all((st.mem[tile_off(5, ch) : tile_off(5, ch) + 16] == 0).all() for ch in range(CHUNKS))


@pytest.mark.parametrize(
    "raw_at",
    [lambda r, q: (r ^ 16, 36 + q), lambda r, q: ((r + 8) % ROWS, 36 + q)],
    ids=["same_warp_other_row", "other_warp_row"],
)
def test_the_emulation_catches_raw_pieces_that_lie_in_another_rows_lines(raw_at):
    with pytest.raises(AssertionError, match="overwrit"):
        run_producer(random_fp8_rows(4), raw_at, 4)
