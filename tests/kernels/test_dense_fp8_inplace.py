"""Specification of the warp-specialized fp8 kernel's in-place conversion (fp8_raw_off and fp8_convert_tile in
kernels/mla_verify/csrc/mla_verify_wgmma_ws_fp8.cuh), checked on the CPU against the CUDA source itself.

A prefix tile's 64 fp8 rows (dims block b: 64 rows x 64 B = 4 KiB) land, blocks 0-7 at fp8_raw_off(b) inside the
tile's own stage (nine 8 KiB atoms; atom b holds the f16 dims of block b), block 8 in the stage's slice of the P atom
(outside the stage). The V warpgroup issues them while it still reads atoms 4-7 and P (atom 8) of the stage's previous
tile, so blocks 0-7 must lie in atoms 0-3, which only the S warpgroup reads. The producer warpgroup converts them in
phases separated by producer barriers. No thread waits for another inside a phase, so the schedule is safe only if no
phase writes an atom that holds raw bytes read in that phase or a later one; a block read into registers may be
written in a later phase. The GPU checks (parity against the oracle, racecheck, synccheck) run on the device only.
"""

from __future__ import annotations

import re

from tests.support.paths import KERNELS

ATOM, BLOCKS, RAW_BLOCK = 8192, 9, 64 * 64
S_ONLY_ATOMS = 4  # atoms 0-3: dims 0..255, read by the S warpgroup alone (its QK and its PV half)
SRC = (KERNELS / "mla_verify" / "csrc" / "mla_verify_wgmma_ws_fp8.cuh").read_text(encoding="utf-8")


def raw_off(b: int) -> int | None:
    """fp8_raw_off(b) for the blocks in the stage (b < 8), evaluated from its C++ return expression (integer
    arithmetic); None for block 8 (the P-atom slice, outside the stage)."""
    if b == BLOCKS - 1:
        return None
    expr = re.search(r"fp8_raw_off\(int b\) \{\s*return (.*?);\s*\}", SRC, re.S).group(1)
    py = re.sub(r"(\d)u\b", r"\1", expr.replace("(uint32_t)", "")).replace("/", "//")
    return int(eval(py, {"b": b, "ATOM": ATOM}))  # noqa: S307


def phases() -> list[tuple[str, int, int]]:
    """fp8_convert_tile's body as (op, block, phase): 'r' = raw bytes into registers (fp8_load_block), 'w' = registers
    to the f16 atom (fp8_store_block); a block number may be a loop variable (`for (int b = B0; b < B1; ++b)
    fp8_load_block(tile, r, [K + ]b, ...)`)."""
    body = re.search(r"void fp8_convert_tile\(.*?\) \{(.*?)\n\}", SRC, re.S).group(1)
    ops, phase, loop = [], 0, None
    for line in body.splitlines():
        if m := re.search(r"for \(int b = (\d+); b < (\d+); \+\+b\)", line):
            loop = range(int(m.group(1)), int(m.group(2)))
        if "producer_sync()" in line:
            phase += 1
        elif m := re.search(r"fp8_(load|store)_block\((?:tile, rope|sT), r, (?:(\d+) \+ )?(\d+|b), ", line):
            op, k, blk = "r" if m.group(1) == "load" else "w", int(m.group(2) or 0), m.group(3)
            ops += [(op, k + b, phase) for b in (loop if blk == "b" else [int(blk)])]
        if "fp8_" in line:
            loop = None  # a loop covers the one statement after its header
    return ops


def stage_spans() -> list[tuple[int, int]]:
    return sorted((off, off + RAW_BLOCK) for b in range(BLOCKS) if (off := raw_off(b)) is not None)


def test_raw_blocks_are_disjoint_aligned_and_in_the_atoms_only_the_s_warpgroup_reads():
    spans = stage_spans()
    assert len(spans) == BLOCKS - 1
    assert all(lo % 16 == 0 and 0 <= lo and hi <= S_ONLY_ATOMS * ATOM for lo, hi in spans), spans
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), spans


def test_the_copies_land_where_the_conversion_reads():
    assert "cp_async16(sT + fp8_raw_off(b) + row * 64 + r.sub4 * 16, src + b * 64" in SRC
    assert "cp_async16(sR + row * 64 + r.sub4 * 16, src + 8 * 64" in SRC, "block 8 into the P-atom slice"
    assert "b < 8 ? tile + fp8_raw_off(b) : rope" in SRC


def test_every_block_is_read_once_and_written_once_after_its_read():
    ops = phases()
    reads = {b: p for op, b, p in ops if op == "r"}
    writes = {b: p for op, b, p in ops if op == "w"}
    assert sorted(reads) == sorted(writes) == list(range(BLOCKS))
    assert len(ops) == 2 * BLOCKS
    assert all(writes[b] >= reads[b] for b in range(BLOCKS))


def violations(ops: list[tuple[str, int, int]], off) -> list[tuple[int, int, int]]:
    """(phase, atom written, raw block) wherever a phase writes over raw bytes (in the stage: off(b) not None) read in
    that phase or a later one."""
    reads = {b: p for op, b, p in ops if op == "r"}
    out = []
    for op, w, phase in ops:
        if op == "r":
            continue
        for b, read_phase in reads.items():
            o = off(b)
            if o is not None and read_phase >= phase and o < (w + 1) * ATOM and w * ATOM < o + RAW_BLOCK:
                out.append((phase, w, b))
    return out


def test_no_phase_writes_an_atom_holding_raw_bytes_read_in_that_phase_or_later():
    assert violations(phases(), raw_off) == []


def test_the_check_catches_a_missing_barrier_and_a_raw_block_in_its_own_atom():
    one_phase = [(op, b, 0) for op, b, _ in phases()]
    assert violations(one_phase, raw_off), "without the barriers a write lands on unread raw bytes"
    assert violations(phases(), lambda b: b * ATOM), "raw bytes in their own atom are overwritten in their phase"


def test_the_barriers_and_row_maxima_fit_the_bytes_the_launcher_adds():
    """The P atom holds raw rope bytes, so the kernel's mbarriers and m_fin live after the layout (Fp8Bars): every
    barrier below m_fin's offset, m_fin's BM floats inside WS_FP8_BAR_BYTES, and tiles.py's mirror of the request."""
    from mla_verify import tiles

    bars = re.search(r"struct Fp8Bars \{(.*?)\n\};", SRC, re.S).group(1)
    offs = [int(o or 0) + (8 if st else 0) for o, st in re.findall(r"return bar0(?: \+ (\d+)u)?( \+ 8u \* st)?;", bars)]
    m_fin = int(re.search(r"m_fin_off = Smem::used \+ (\d+);", bars).group(1))
    extra = re.search(r"constexpr int WS_FP8_BAR_BYTES = (\d+) \+ BM \* 4;", SRC)
    assert len(offs) == 7 and max(offs) + 8 <= m_fin, (offs, m_fin)
    assert extra and int(extra.group(1)) == m_fin
    assert tiles.SM90WG_WS_FP8_SMEM_BYTES == tiles.SM90WG.smem_bytes + m_fin + tiles.SM90WG.block_m * 4
    assert "sP" not in bars, "no barrier in the P atom (raw rope bytes land there)"
