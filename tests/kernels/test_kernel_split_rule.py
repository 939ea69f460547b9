"""The device-side split count (issue 11), checked on CPU.

The kernel evaluates the host's exact-length split rule itself when the count is automatic
(mla_verify_kernel.cuh, effective_splits): lane i of a warp tries s = i + 1, i + 33, ... with
32-bit unsigned arithmetic and shifts by log2(BN), then a warp min over (cost << 8 | s). This
emulates that procedure step for step and checks it against api.splits_for_total (which
choose_num_splits uses), plus the properties the graph path relies on. The GPU side (a replayed
graph equals an eager call with that count, bit for bit) is verify_tools.parity's graph cases.
"""

from __future__ import annotations

import random

import pytest

from mla_verify import api, tiles

U32 = 2**32


def device_splits(rule: api.SplitRule, B: int, total: int, n_kv_indices: int, grid: int) -> int:
    """Python transcription of effective_splits (split_auto = 1)."""
    if grid <= 1:
        return grid
    total = min(max(total, 0), n_kv_indices)
    if total == n_kv_indices:  # exact-size buffer: the host's count (the grid's)
        return grid
    if total < 1:
        return 1
    if total <= (U32 - 1) // 1152 and rule.part_div <= U32 - 1:
        cap = max(total * 1152, 48 << 20)
        length = (total + B - 1) // B
        s_max = cap // rule.part_div
    else:
        length = min((total + B - 1) // B, 2**31 - 1)
        s_max = max(total * 1152, 48 << 20) // rule.part_div
    s_max = min(s_max, rule.s_cap)
    s_max = grid if s_max > grid else max(1, s_max)
    sh = rule.bn.bit_length() - 1
    keys = []
    for lane in range(32):
        best = 2**64 - 1
        for s in range(lane + 1, s_max + 1, 32):
            chunk = ((((length + s - 1) // s) + rule.bn - 1) >> sh) << sh
            assert chunk < U32
            before = (s - 1) * chunk
            last = 0 if before >= length else length - before
            a = chunk >> sh if s > 1 else 0
            c = ((last + rule.bn - 1) >> sh) + rule.draft_tiles
            best = min(best, (max(a, c) << 8) | s)
        keys.append(best)
    return min(keys) & 255


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
