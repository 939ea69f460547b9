"""The device-side split count (issue 11), checked on CPU.

The kernel evaluates the host's exact-length split rule itself when the count is automatic
(mla_verify_kernel.cuh, effective_splits). Fast path (session 14): lane i of a warp takes
s = i + 1 + 32k, k < 4, computes every ceiling as floor((total - 1) * r) + 1 with r = the fp32
reciprocal of B * BN (* s) rounded up (floor_div_rcp: one fma rounded toward zero), and a
redux.sync min over the 32-bit key cost * 256 + s. General path (huge totals or parameters): the
previous procedure, 32-bit divisions and shifts by log2(BN), a 64-bit shuffle min over
(cost << 8 | s). `device_splits` emulates both step for step (vectorized over totals) and the
tests check it against api.splits_for_total (which choose_num_splits uses), plus the properties
the graph path relies on. The GPU side (a replayed graph equals an eager call with that count,
bit for bit) is verify_tools.parity's graph cases.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from mla_verify import api, tiles

U32 = 2**32
M32 = U32 - 1  # UINT_MAX
FAST_TOTAL_MAX = M32 // 1152  # the fast path's total bound (and the general path's 32-bit branch)
NOT_ADMITTED = 2**24 - 1  # cost floor of an s past s_max: above every admitted cost (< 2^22 + 2^23)


def rcp_ru(d: int) -> tuple[int, int]:
    """__frcp_ru(d) for an integer 1 <= d <= 2^24 (exact in fp32), as (M, E): r = M / 2^E, the
    smallest fp32 >= 1/d (1/d in (2^-e, 2^(1-e)], e = d.bit_length(), where fp32 steps by 2^-(e+23))."""
    assert 1 <= d <= 2**24
    e = d.bit_length()
    return -(-(1 << (e + 23)) // d), e + 23


def floor_div_rcp(x, rcp: tuple[int, int]):
    """floor(x * r) of the exact product: the bits of __fmaf_rz(x, r, 2^23) minus 0x4B000000
    (x < 2^22, so 2^23 + x*r lies in [2^23, 2^24) where fp32 steps by 1)."""
    m, e = rcp
    return (x * m) >> e


def _host_fast_guard(rule: api.SplitRule, B: int, grid: int) -> bool:
    bn, dt, pd = rule.bn, rule.draft_tiles, rule.part_div
    return (
        grid <= 128
        and B >= 1
        and bn > 0
        and bn & (bn - 1) == 0
        and B * bn <= 2**17
        and 0 <= dt < 2**23
        and 1 <= pd <= M32
    )


def _lane_terms(rule: api.SplitRule, B: int, grid: int):
    """Parameter / lane terms, [k, lane] arrays (computed ahead of the loaded total on the device):
    s = lane + 1 + 32k, the fp32 reciprocals of B * BN * s as (M, E) and the admission limits
    lim_s (s * part_div, 0 for s = 1, UINT_MAX past min(rule_s_cap, p.S) or past 32 bits)."""
    D = (B * rule.bn) & M32
    s = np.arange(1, 129, dtype=np.int64).reshape(4, 32)
    rcp = [rcp_ru(int(d)) for d in ((D * s) & M32).ravel()]
    m = np.array([r[0] for r in rcp], dtype=np.int64).reshape(4, 32)
    e = np.array([r[1] for r in rcp], dtype=np.int64).reshape(4, 32)
    lim = s * rule.part_div  # < 2^39 under the fast guard (64-bit on the device)
    lim_s = np.where((s > min(rule.s_cap, grid)) | (lim > M32), M32, lim)
    lim_s[s == 1] = 0
    return s, m, e, lim_s, rcp_ru(D)


def _fast_path(rule: api.SplitRule, B: int, t: np.ndarray, grid: int) -> np.ndarray:
    s, m, e, lim_s, rcp_lt = _lane_terms(rule, B, grid)
    dt = rule.draft_tiles
    out = np.empty(t.shape, dtype=np.int64)
    for i in range(0, t.size, 8192):  # [total, k, lane] blocks
        tt = t[i : i + 8192]
        x = tt - 1  # exact in fp32 (< 2^22)
        cap = np.maximum(tt * 1152, api.PARTIAL_CAP_BYTES)  # < 2^32: no wrap
        lt_dt = floor_div_rcp(x, rcp_lt) + 1 + dt  # Lt + dt
        x3, cap3, lt_dt3 = x[:, None, None], cap[:, None, None], lt_dt[:, None, None]
        q = floor_div_rcp(x3, (m, e)) + 1
        floor_c = np.where(cap3 >= lim_s, dt, NOT_ADMITTED)
        cost = lt_dt3 + (1 - s) * q  # int32 on the device
        assert (np.abs(cost) < 2**31).all()
        cost = np.maximum(np.maximum(cost, q), floor_c)
        key = cost * 256 + s  # unsigned 32-bit on the device: must not wrap
        assert (cost >= 0).all() and (key <= M32).all()
        best = key.min(axis=1)  # each lane's min over its 4 candidates
        warp = best.min(axis=1)  # __reduce_min_sync over the 32 lanes
        assert (warp >> 8 < NOT_ADMITTED).all()  # s = 1 (lane 0) is always admitted
        out[i : i + 8192] = warp & 255
    return out


def device_splits_array(rule: api.SplitRule, B: int, total, n_kv_indices: int, grid: int) -> np.ndarray:
    """Python transcription of effective_splits (split_auto = 1, p.S = grid) for an array of
    kv_indptr[B] - kv_indptr[0] values; returns the counts (int64 array)."""
    diff = np.asarray(total, dtype=np.int64)
    out = np.full(diff.shape, -1, dtype=np.int64)
    if grid <= 1:
        out[:] = grid
        return out
    total_c = np.clip(diff, 0, n_kv_indices)
    todo = total_c != n_kv_indices
    out[~todo] = grid  # exact-size buffer: the host's count (the grid's)
    if _host_fast_guard(rule, B, grid):
        m = todo & (diff >= 1) & (diff <= FAST_TOTAL_MAX)  # past the shortcut: total == diff
        out[m] = _fast_path(rule, B, diff[m], grid)
        todo &= ~m
    small = todo & (total_c < 1)
    out[small] = 1
    todo &= ~small
    if todo.any():  # general path: the pre-session-14 procedure
        out[todo] = _general_path(rule, B, total_c[todo], grid)
    return out


def _general_path(rule: api.SplitRule, B: int, total: np.ndarray, grid: int) -> np.ndarray:
    bn, dt, pd = rule.bn, rule.draft_tiles, rule.part_div
    assert B >= 1 and bn > 0 and bn & (bn - 1) == 0 and pd >= 1  # the binding's checks
    lo = total <= FAST_TOTAL_MAX if pd <= M32 else np.zeros(total.shape, dtype=bool)
    length = np.empty(total.shape, dtype=np.int64)
    s_max64 = np.empty(total.shape, dtype=np.int64)
    t = total[lo]  # 32-bit branch
    length[lo] = ((t + B - 1) & M32) // B
    s_max64[lo] = np.maximum(t * 1152, api.PARTIAL_CAP_BYTES) // (pd & M32)
    t = total[~lo]  # 64-bit branch
    length[~lo] = np.minimum((t + B - 1) // B, 2**31 - 1)
    s_max64[~lo] = np.maximum(t * 1152, api.PARTIAL_CAP_BYTES) // pd
    s_max64 = np.minimum(s_max64, rule.s_cap)
    s_max = np.where(s_max64 > grid, grid, np.maximum(s_max64, 1))
    sh, bn_1 = bn.bit_length() - 1, bn - 1
    turns = -(-int(s_max.max()) // 32)
    s = np.arange(1, 32 * turns + 1, dtype=np.int64).reshape(turns, 32)  # lane i: s = i + 1, i + 33, ...
    n3, sm3 = length[:, None, None], s_max[:, None, None]
    chunk = (((((n3 + s - 1) & M32) // s + bn_1) & M32) >> sh) << sh
    before = (s - 1) * chunk  # 64-bit
    last = np.where(before >= n3, 0, n3 - before)
    a = np.where(s > 1, chunk >> sh, 0)
    c = (((last + bn_1) >> sh) + dt) & M32
    key = (np.maximum(a, c) << 8) | s  # 64-bit key
    key = np.where(s <= sm3, key, np.iinfo(np.int64).max)  # the lane's loop stops at s_max
    best = key.min(axis=1)  # each lane's loop
    warp = best.min(axis=1)  # five xor-shuffle rounds
    return warp & 255


def device_splits(rule: api.SplitRule, B: int, total: int, n_kv_indices: int, grid: int) -> int:
    """effective_splits for one total."""
    return int(device_splits_array(rule, B, [total], n_kv_indices, grid)[0])


def host_splits_array(rule: api.SplitRule, B: int, total: np.ndarray, grid: int) -> np.ndarray:
    """api.splits_for_total transcribed with numpy over an array of totals (tied to it below)."""
    total = np.maximum(np.asarray(total, dtype=np.int64), 0)
    out = np.ones(total.shape, dtype=np.int64)
    if rule.s_cap <= 1 or grid <= 1:
        return out
    length = np.minimum(-(-total // B), 2**31 - 1)
    s_max = np.maximum(
        1, np.minimum(np.minimum(rule.s_cap, np.maximum(total * 1152, api.PARTIAL_CAP_BYTES) // rule.part_div), grid)
    )
    bn = rule.bn
    best_cost = np.full(total.shape, np.iinfo(np.int64).max, dtype=np.int64)
    for s in range(1, int(s_max.max()) + 1):
        per = -(-length // s)
        chunk = -(-per // bn) * bn
        last = np.maximum(0, length - (s - 1) * chunk)
        cost = np.maximum(chunk // bn if s > 1 else 0, -(-last // bn) + rule.draft_tiles)
        upd = (s <= s_max) & (cost < best_cost)
        out[upd] = s
        best_cost[upd] = cost[upd]
    out[total < 1] = 1
    return out


def _random_cases(n: int, seed: int):
    rnd = random.Random(seed)
    for _ in range(n):
        B = rnd.choice([1, 1, 2, 3, 4, 8, 16, 32, 64])
        n_draft = rnd.choice([1, 2, 4, 8, 16, 32])
        H = rnd.choice([8, 16, 32, 64, 128])
        cfg = rnd.choice(list(tiles.CONFIGS.values()))
        sms = rnd.choice([132, 84, 170, 188])
        cps = rnd.choice([None, 1, 2])
        rule = api.split_rule(B, n_draft, H, sms, cfg, cps)
        buf = rnd.choice([B * 131072 * n_draft, B * 4096, B * 65536, rnd.randint(1, 3_000_000)])
        total = rnd.choice([0, 1, 63, 64, 65, rnd.randint(0, buf), buf, buf + 10])
        yield B, n_draft, H, cfg, sms, cps, rule, buf, total


def test_device_procedure_equals_the_host_rule():
    n = 0
    for B, _n, _H, _cfg, _sms, _cps, rule, buf, total in _random_cases(4000, seed=11):
        grid = api.splits_for_total(rule, B, buf)
        want = api.splits_for_total(rule, B, min(total, buf), grid)
        assert device_splits(rule, B, total, buf, grid) == want, (rule, B, total, buf, grid)
        n += 1
    assert n == 4000


def test_choose_num_splits_is_the_rule_on_the_index_count():
    for B, n_draft, H, cfg, sms, cps, rule, buf, _total in _random_cases(2000, seed=12):
        assert api.choose_num_splits(B, n_draft, H, buf, sms, cfg, cps) == api.splits_for_total(rule, B, buf)


def test_capped_count_never_exceeds_the_grid_and_matches_when_the_cap_is_loose():
    for B, _n, _H, _cfg, _sms, _cps, rule, buf, total in _random_cases(2000, seed=13):
        grid = api.splits_for_total(rule, B, buf)
        capped = api.splits_for_total(rule, B, total, grid)
        assert 1 <= capped <= grid
        free = api.splits_for_total(rule, B, total)
        if free <= grid:
            assert capped == free  # the argmin over [1, grid] contains the global one


def test_combine_layout_covers_the_effective_count():
    """The combine launch is laid out for the grid's count; the device's count must need no more warps."""
    from_cuh = {1: 1, 4: 1, 5: 2, 8: 2, 9: 4, 16: 4, 17: 8, 128: 8}  # combine_warps_per_unit
    w = lambda s: 8 if s > 16 else 4 if s > 8 else 2 if s > 4 else 1  # noqa: E731
    assert all(w(s) == v for s, v in from_cuh.items())
    assert all(w(a) <= w(b) for a in range(1, 129) for b in range(a, 129))


@pytest.mark.parametrize("L", [512, 4096, 32768, 131072])
def test_b1_graph_buffer_replays_run_the_exact_length_count(L):
    """SGLang's B=1 graph buffer (131,077 x 16 slots): the replay runs the exact-length count."""
    cfg = tiles.SM90WG
    rule = api.split_rule(1, 4, 16, 132, cfg, 1)
    grid = api.splits_for_total(rule, 1, 16 * 131077)
    exact = api.choose_num_splits(1, 4, 16, L, 132, cfg, 1)
    assert device_splits(rule, 1, L, 16 * 131077, grid) == exact
    assert exact <= grid


def test_rule_needs_power_of_two_tiles():
    assert all(c.block_n & (c.block_n - 1) == 0 for c in tiles.CONFIGS.values())


def test_floor_div_rcp_is_exact():
    """floor_div_rcp(x, rcp_ru(d)) == x // d for x < 2^22. Within a block of x with the same
    quotient, x * r - x / d grows with x, so the block's last x (x = d - 1 mod d) and x = 2^22 - 1
    are the only candidates for a wrong floor: all d <= 4096, every power of two up to 2^24 and
    its neighbours, and 300 random d up to 2^24."""
    rnd = random.Random(5)
    ds = (
        set(range(1, 4097))
        | {2**j + o for j in range(12, 25) for o in (-1, 0, 1)}
        | {rnd.randint(1, 2**24) for _ in range(300)}
    )
    for d in sorted(x for x in ds if 1 <= x <= 2**24):
        x = np.concatenate([np.arange(d - 1, 2**22, d, dtype=np.int64), np.array([0, 1, 2**22 - 1], dtype=np.int64)])
        assert np.array_equal(floor_div_rcp(x, rcp_ru(d)), x // d), d


def test_rcp_ru_is_the_smallest_fp32_at_or_above_the_reciprocal():
    for d in list(range(1, 3000)) + [2**24 - 1, 2**24, 3 * 2**20, 131071 * 128]:
        m, e = rcp_ru(d)
        assert m * d >= 1 << e and (m - 1) * d < 1 << e  # smallest on the 2^-e grid at or above 1/d
        assert 2**23 <= m <= 2**24 and (m < 2**24 or d & (d - 1) == 0)  # an fp32 significand (or 2^k)


# (rule, B, index buffer) of the exhaustive sweep: api.split_rule for B = 1..32 on the sm90wg tiles
# (BN = 64; draft tiles 1 or 2; s_cap from 2 to the maximum 128), SGLang's graph buffer
# max_bs * num_draft * 131077 (the grid's count), plus rules whose partial-traffic cap binds.
SWEEP_RULES = [
    (api.split_rule(1, 8, 16, 132, tiles.SM90WG, 1), 1, 8 * 131077),
    (api.split_rule(1, 1, 16, 132, tiles.SM90WG, 1), 1, 1 * 131077),
    (api.split_rule(1, 128, 1, 132, tiles.SM90WG, 1), 1, 128 * 131077),
    (api.split_rule(2, 8, 16, 132, tiles.SM90WG, 1), 2, 2 * 8 * 131077),
    (api.split_rule(4, 4, 16, 132, tiles.SM90WG, 1), 4, 4 * 4 * 131077),
    (api.split_rule(8, 8, 16, 132, tiles.SM90WG, 1), 8, 8 * 8 * 131077),
    (api.split_rule(32, 8, 16, 132, tiles.SM90WG, 1), 32, 32 * 8 * 131077),
    (api.split_rule(32, 2, 16, 132, tiles.SM90WG, 2), 32, 32 * 2 * 131077),
    (api.SplitRule(128, 1, 64, 2**22), 1, 10**9),
    (api.SplitRule(128, 2, 64, 10**6), 3, 10**9),
]
SWEEP_TOTAL = 300_000


@pytest.mark.parametrize("rule,B,buf", SWEEP_RULES)
def test_every_total_up_to_300k_gives_the_host_count(rule, B, buf):
    """Exhaustive: every replayed total 1..300,000 (the fast path), device procedure == host rule,
    for the grid of the capture and for a tighter grid."""
    assert rule.bn == 64 and rule.draft_tiles in (1, 2)
    totals = np.arange(1, SWEEP_TOTAL + 1, dtype=np.int64)
    buf = max(buf, SWEEP_TOTAL + 1)  # totals past the buffer clamp to it (the shortcut): kept below
    for grid in sorted({api.splits_for_total(rule, B, buf), 17}):
        assert _host_fast_guard(rule, B, grid)
        got = device_splits_array(rule, B, totals, buf, grid)
        want = host_splits_array(rule, B, totals, grid)
        bad = np.flatnonzero(got != want)
        assert bad.size == 0, (rule, B, grid, totals[bad[:5]], got[bad[:5]], want[bad[:5]])
        # the numpy host rule is api.splits_for_total: every 211th total and 300 random ones
        rnd = random.Random(rule.part_div + B)
        for T in list(range(1, SWEEP_TOTAL + 1, 211)) + [rnd.randint(1, SWEEP_TOTAL) for _ in range(300)]:
            assert want[T - 1] == api.splits_for_total(rule, B, T, grid), (rule, B, grid, T)


def test_fast_path_guards_fall_back_to_the_general_path():
    """Parameters just past each fast-path guard take the general path and still give the host count."""
    B, buf = 1, 10**9
    cases = [
        (api.SplitRule(128, 1, 64, 10**6), 129),  # p.S > 128
        (api.SplitRule(128, 2**23, 64, 10**6), 128),  # draft tiles >= 2^23
        (api.SplitRule(128, 1, 2**18, 10**6), 128),  # B * BN > 2^17
        (api.SplitRule(128, 1, 64, 2**32), 128),  # part_div >= 2^32
    ]
    totals = np.array([1, 2, 63, 64, 65, 4095, 4096, 70_000, FAST_TOTAL_MAX, FAST_TOTAL_MAX + 1, 5_000_000])
    for rule, grid in cases:
        assert not _host_fast_guard(rule, B, grid)
        got = device_splits_array(rule, B, totals, buf, grid)
        want = [api.splits_for_total(rule, B, int(T), grid) for T in totals]
        assert got.tolist() == want, rule
    edge = api.SplitRule(128, 2**23 - 1, 64, 10**6)  # the largest draft-tile count the fast path takes
    assert _host_fast_guard(edge, B, 128)
    got = device_splits_array(edge, B, totals, buf, 128)
    assert got.tolist() == [api.splits_for_total(edge, B, int(T), 128) for T in totals]
