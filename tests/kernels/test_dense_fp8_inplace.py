"""Specification of the warp-specialized fp8 kernel's in-place conversion (fp8_raw_off and fp8_convert_tile in
kernels/mla_verify/csrc/mla_verify_wgmma_ws_fp8.cuh), checked on the CPU against the CUDA source itself.

A prefix tile's 64 fp8 rows (dims block b: 64 rows x 64 B = 4 KiB) land at fp8_raw_off(b) inside the tile's own stage
(nine 8 KiB atoms; atom b holds the f16 dims of block b), and the producer warpgroup converts them in phases separated
by producer barriers. No thread waits for another inside a phase, so the schedule is safe only if no phase writes an
atom that holds raw bytes read in that phase or a later one; a block read into registers may be written in a later
phase. The GPU checks (parity against the oracle, racecheck, synccheck) run on the device only.
"""

from __future__ import annotations

import re

from tests.support.paths import KERNELS

ATOM, BLOCKS, RAW_BLOCK = 8192, 9, 64 * 64
SRC = (KERNELS / "mla_verify" / "csrc" / "mla_verify_wgmma_ws_fp8.cuh").read_text(encoding="utf-8")


def raw_off(b: int) -> int:
    """fp8_raw_off(b), evaluated from its C++ return expression (one ternary over integer arithmetic)."""
    expr = re.search(r"fp8_raw_off\(int b\) \{\s*return (.*?);\s*\}", SRC, re.S).group(1)
    cond, rest = expr.split("?", 1)
    yes, no = rest.split(":", 1)

    def py(e: str) -> str:
        return re.sub(r"(\d)u\b", r"\1", e.replace("(uint32_t)", "")).replace("/", "//")

    return int(eval(f"({py(yes)}) if ({py(cond)}) else ({py(no)})", {"b": b, "ATOM": ATOM}))  # noqa: S307


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
        elif m := re.search(r"fp8_(load|store)_block\((?:tile|sT), r, (?:(\d+) \+ )?(\d+|b), ", line):
            op, k, blk = "r" if m.group(1) == "load" else "w", int(m.group(2) or 0), m.group(3)
            ops += [(op, k + b, phase) for b in (loop if blk == "b" else [int(blk)])]
        if "fp8_" in line:
            loop = None  # a loop covers the one statement after its header
    return ops


def test_raw_blocks_are_disjoint_aligned_and_inside_the_stage():
    spans = sorted((raw_off(b), raw_off(b) + RAW_BLOCK) for b in range(BLOCKS))
    assert all(lo % 16 == 0 and 0 <= lo and hi <= BLOCKS * ATOM for lo, hi in spans)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), spans
    assert "fp8_raw_off(b) + row * 64 + r.sub4 * 16" in SRC, "the copies land where the conversion reads"


def test_every_block_is_read_once_and_written_once_after_its_read():
    ops = phases()
    reads = {b: p for op, b, p in ops if op == "r"}
    writes = {b: p for op, b, p in ops if op == "w"}
    assert sorted(reads) == sorted(writes) == list(range(BLOCKS))
    assert len(ops) == 2 * BLOCKS
    assert all(writes[b] >= reads[b] for b in range(BLOCKS))


def violations(ops: list[tuple[str, int, int]], off) -> list[tuple[int, int, int]]:
    """(phase, atom written, raw block) wherever a phase writes over raw bytes read in that phase or a later one."""
    reads = {b: p for op, b, p in ops if op == "r"}
    out = []
    for op, w, phase in ops:
        if op == "r":
            continue
        for b, read_phase in reads.items():
            if read_phase >= phase and off(b) < (w + 1) * ATOM and w * ATOM < off(b) + RAW_BLOCK:
                out.append((phase, w, b))
    return out


def test_no_phase_writes_an_atom_holding_raw_bytes_read_in_that_phase_or_later():
    assert violations(phases(), raw_off) == []


def test_the_check_catches_a_missing_barrier_and_a_raw_block_in_its_own_atom():
    one_phase = [(op, b, 0) for op, b, _ in phases()]
    assert violations(one_phase, raw_off), "without the barriers a write lands on unread raw bytes"
    assert violations(phases(), lambda b: b * ATOM), "raw bytes in their own atom are overwritten in their phase"
