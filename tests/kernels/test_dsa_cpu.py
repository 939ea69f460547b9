"""CPU tests of the DSA verify kernel's Python side: fp8 656-byte layout, oracle semantics,
inputs, argument validation, split plan and the nvcc/ptxas build check (sm_90a and sm_120a)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from dsa_verify import api, layout, tiles  # noqa: E402
from dsa_verify.inputs import DsaCase, make_inputs, topk_overlap  # noqa: E402
from dsa_verify.reference import dsa_verify_ref, used_mask  # noqa: E402
from verify_tools.build_check import dsa_build, parse_ptxas  # noqa: E402


# ---- fp8 656-byte rows ----
def test_pack_unpack_roundtrip_bytes():
    g = torch.Generator().manual_seed(0)
    n = 7
    nope = torch.randint(0, 256, (n, 512), generator=g, dtype=torch.uint8)
    nope[nope == 0x7F] = 0  # keep NaN codes out of the equality check
    nope[nope == 0xFF] = 0
    scales = torch.rand(n, 4, generator=g) * 3
    rope = torch.randn(n, 64, generator=g).to(torch.bfloat16)
    rows = layout.pack_rows(nope, scales, rope)
    assert rows.shape == (n, 656) and rows.dtype == torch.uint8
    n2, s2, r2 = layout.unpack_rows(rows)
    assert torch.equal(n2.view(torch.uint8), nope)
    assert torch.equal(s2, scales)
    assert torch.equal(r2.view(torch.int16), rope.view(torch.int16))
    # byte offsets: scales at [512, 528), rope at [528, 656)
    assert torch.equal(rows[:, 512:528].contiguous().view(torch.float32), scales)
    assert torch.equal(rows[:, 528:].contiguous().view(torch.bfloat16).view(torch.int16), rope.view(torch.int16))


def test_dequantize_is_e4m3_times_block_scale():
    g = torch.Generator().manual_seed(1)
    n = 3
    codes = torch.randn(n, 512, generator=g).mul(50).clamp(-448, 448).to(torch.float8_e4m3fn)
    scales = torch.tensor([[1.0, 2.0, 0.5, 2.0**-20]] * n)
    rope = torch.randn(n, 64, generator=g).to(torch.bfloat16)
    x = layout.dequantize_rows(layout.pack_rows(codes, scales, rope))
    want = codes.to(torch.float64).reshape(n, 4, 128) * scales.double().reshape(n, 4, 1)
    assert torch.equal(x[:, :512], want.reshape(n, 512))
    assert torch.equal(x[:, 512:], rope.double())


def test_quantize_matches_sglang_rule():
    """scale = amax / 448 per 128 dims; all-zero block -> scale 0 and zero codes; error <= e4m3 step."""
    g = torch.Generator().manual_seed(2)
    kv = torch.randn(5, 576, generator=g).to(torch.bfloat16)
    kv[1, 128:256] = 0
    rows = layout.quantize_rows(kv)
    _, s, rope = layout.unpack_rows(rows)
    amax = kv[:, :512].float().reshape(5, 4, 128).abs().amax(-1)
    assert torch.allclose(s, amax / 448.0)
    assert s[1, 1] == 0
    deq = layout.dequantize_rows(rows)
    assert torch.equal(deq[1, 128:256], torch.zeros(128, dtype=torch.float64))
    rel = (deq[:, :512] - kv[:, :512].double()).abs() / amax.double().repeat_interleave(128, 1).clamp(min=1e-30)
    assert float(rel.max()) <= 2.0**-4  # e4m3: 3 mantissa bits, relative to the block amax
    assert torch.equal(rope.view(torch.int16), kv[:, 512:].contiguous().view(torch.int16))


def test_quantize_cache_is_quantize_rows_per_slot():
    """The tools' fp8 form of a bf16 cache [slots, 1, 576]: SGLang's [slots, 1, 656] rows, slot by slot."""
    g = torch.Generator().manual_seed(3)
    kv = torch.randn(7, 1, 576, generator=g).to(torch.bfloat16)
    cache = layout.quantize_cache(kv)
    assert cache.shape == (7, 1, 656) and cache.dtype == torch.uint8
    assert torch.equal(cache[:, 0], layout.quantize_rows(kv[:, 0]))


def test_layout_rejects_bad_shapes():
    with pytest.raises(ValueError, match="rows"):
        layout.unpack_rows(torch.zeros(2, 655, dtype=torch.uint8))
    with pytest.raises(ValueError, match="scales"):
        layout.pack_rows(torch.zeros(2, 512, dtype=torch.uint8), torch.zeros(2, 3), torch.zeros(2, 64).bfloat16())
    with pytest.raises(ValueError, match="kv"):
        layout.quantize_rows(torch.zeros(2, 512))


# ---- oracle semantics ----
def _naive(q, rows, pt, sl, scale):
    """Per-row loop: gather the used entries, exact softmax (float64)."""
    T, H, _ = q.shape
    out = torch.zeros(T, H, 512, dtype=torch.float64)
    lse = torch.full((T, H), float("-inf"), dtype=torch.float64)
    for t in range(T):
        k = max(0, min(int(sl[t]), pt.shape[1]))
        ids = [int(i) for i in pt[t, :k] if 0 <= int(i) < rows.shape[0]]
        if not ids:
            continue
        kk = rows[ids]
        s = q[t].double() @ kk.T * scale
        lse[t] = torch.logsumexp(s, -1)
        out[t] = torch.softmax(s, -1) @ kk[:, :512]
    return out, lse


def test_oracle_matches_naive_bf16_with_hostile_entries():
    g = torch.Generator().manual_seed(3)
    slots, T, H, K = 50, 6, 4, 16
    kv = torch.randn(slots, 1, 576, generator=g).to(torch.bfloat16)
    q = torch.randn(T, H, 576, generator=g).to(torch.bfloat16)
    pt = torch.randint(0, slots, (T, K), generator=g, dtype=torch.int32)
    pt[0, 3] = -1
    pt[1, 0] = slots  # out of range: skipped
    pt[2, 5] = 2**31 - 1
    pt[3, :] = -1  # empty row
    pt[4, 2] = pt[4, 1]  # duplicate slot counts twice
    sl = torch.tensor([16, 10, 40, 16, -3, 0], dtype=torch.int32)  # > K clamps, < 0 and 0 are empty
    o, lse = dsa_verify_ref(q, kv, pt, sl, 0.0625)
    o2, l2 = _naive(q, kv.reshape(slots, 576).double(), pt, sl, 0.0625)
    assert torch.allclose(o, o2, atol=1e-12) and torch.allclose(lse, l2)
    assert torch.equal(o[3], torch.zeros(H, 512, dtype=torch.float64)) and bool(torch.isneginf(lse[3]).all())
    assert bool(torch.isneginf(lse[4]).all()) and bool(torch.isneginf(lse[5]).all())


def test_oracle_never_reads_unused_nan_slots():
    g = torch.Generator().manual_seed(4)
    kv = torch.randn(20, 576, generator=g).to(torch.bfloat16)
    kv[0] = float("nan")  # slot 0 never used (SGLang's dummy page)
    kv[7] = float("nan")
    pt = torch.tensor([[3, 7, -1, -1], [1, 2, 4, 0]], dtype=torch.int32)
    sl = torch.tensor([1, 3], dtype=torch.int32)  # slot 7 and slot 0 lie beyond seq_lens
    q = torch.randn(2, 2, 576, generator=g).to(torch.bfloat16)
    o, lse = dsa_verify_ref(q, kv, pt, sl, 0.1)
    assert bool(torch.isfinite(o).all()) and bool(torch.isfinite(lse).all())
    assert torch.allclose(o[0, 0], kv[3, :512].double())  # one entry: softmax weight 1


def test_oracle_fp8_equals_oracle_on_dequantized_bf16_free_rows():
    g = torch.Generator().manual_seed(5)
    kv = torch.randn(30, 576, generator=g).to(torch.bfloat16)
    rows = layout.quantize_rows(kv)
    q = torch.randn(3, 2, 576, generator=g).to(torch.bfloat16)
    pt = torch.randint(0, 30, (3, 8), generator=g, dtype=torch.int32)
    sl = torch.tensor([8, 5, 2], dtype=torch.int32)
    o, _ = dsa_verify_ref(q, rows.reshape(30, 1, 656), pt, sl, 0.0625)
    o2, _ = _naive(q, layout.dequantize_rows(rows), pt, sl, 0.0625)
    assert torch.allclose(o, o2, atol=1e-12)


# ---- inputs: rows as the DSA backend builds them ----
def test_inputs_chain_rows_and_padding():
    c = DsaCase("t", (0, 30, 2045), 4, 8, topk=2048, seed=1, pad_rows=2)
    d = make_inputs(c, "cpu")
    pt, sl = d["page_table_1"], d["seq_lens"]
    assert pt.dtype == torch.int32 and pt.shape == (3 * 4 + 2, 2048)
    assert sl.tolist()[:12] == [1, 2, 3, 4, 31, 32, 33, 34, 2046, 2047, 2048, 2048]
    assert sl.tolist()[12:] == [1, 1] and bool((pt[12:] == -1).all())
    slots = d["meta"]["slots"]
    for b, L in enumerate((0, 30, 2045)):
        for i in range(4):
            r = b * 4 + i
            k = int(sl[r])
            assert bool((pt[r, k:] == -1).all()) and bool((pt[r, :k] >= 64).all())  # page 0 never used
            if L + i + 1 <= 2048:  # the row lists every causal token, itself included
                assert set(pt[r, :k].tolist()) == set(slots[b][: L + i + 1].tolist())
    # unused slots are NaN-poisoned, used ones finite
    used = used_mask(pt, sl, d["meta"]["num_slots"])
    live = torch.zeros(d["meta"]["num_slots"], dtype=torch.bool)
    live[pt.long()[used]] = True
    cache = d["kv_cache"].reshape(-1, 576).float()
    assert bool(torch.isnan(cache[~live]).all()) and bool(torch.isfinite(cache[live]).all())


def test_inputs_fp8_extreme_and_hostile():
    c = DsaCase("t", (3000,), 4, 16, kv="fp8", extreme_scales=True, hostile=True, topk=512, seed=2)
    d = make_inputs(c, "cpu")
    assert d["kv_cache"].shape[1:] == (1, 656)
    _, s, _ = layout.unpack_rows(d["kv_cache"].reshape(-1, 656)[64:128])
    assert float(s.max() / s.min()) > 2.0**20  # scales span many binades across blocks
    o, lse = dsa_verify_ref(d["q_all"], d["kv_cache"], d["page_table_1"], d["seq_lens"], c.sm_scale)
    assert bool(torch.isfinite(o).all())
    assert bool(torch.isneginf(lse[1]).all())  # seq_len -5
    assert bool((d["page_table_1"] >= d["meta"]["num_slots"]).any()) and bool((d["page_table_1"] < -1).any())


def test_scale_spike_case_reaches_the_lazy_sigma_exact_step():
    """fp8_scale_spikes_b2_n4_h64 exercises the lazy sigma's rare path (w64's fp8 kernel): some of w64's splits
    (as planned on an H200) see a block-3 scale above 128 x the power of two over their first tile's maximum,
    and others do not."""
    import math

    from verify_tools import dsa_parity

    case = next(c for c in dsa_parity.CASES if c.name == "fp8_scale_spikes_b2_n4_h64")
    d = make_inputs(case, "cpu")
    pt, sl = d["page_table_1"].long(), d["seq_lens"]
    _, scales, _ = layout.unpack_rows(d["kv_cache"].reshape(-1, 656))
    slots = d["meta"]["num_slots"]
    _, chunk = api.split_plan(pt.shape[0], case.heads, case.topk, 132, 1, tiles.W64)

    def pow2_ceil(x: float) -> float:
        m, e = math.frexp(x)
        return x if m == 0.5 else 2.0**e

    steps = quiet = 0
    for t in range(pt.shape[0]):
        n = max(0, min(int(sl[t]), case.topk))
        for pb in range(0, n, chunk):
            idx = pt[t, pb : min(pb + chunk, n)]
            s3 = torch.where((idx >= 0) & (idx < slots), scales[idx.clamp(0, slots - 1), 3], torch.zeros(()))
            sigma = pow2_ceil(float(s3[:64].max()))
            if bool((s3[64:] > 128 * sigma).any()):
                steps += 1
            else:
                quiet += 1
    assert steps > 0 and quiet > 0, (steps, quiet)


def test_topk_overlap_counts():
    pt = torch.tensor([[1, 2, 3, 4], [2, 3, 4, 5], [9, 9, -1, -1]], dtype=torch.int32)
    sl = torch.tensor([4, 4, 2], dtype=torch.int32)
    r = topk_overlap(pt[:2], sl[:2], 2)
    assert r["consecutive_overlap_mean"] == 0.75
    assert r["unique_fraction_mean"] == 5 / 8


# ---- argument validation (ValueError naming the argument) ----
def _args(T=2, H=8, slots=10, K=16, kv="bf16"):
    q = torch.zeros(T, H, 576, dtype=torch.bfloat16)
    cache = (
        torch.zeros(slots, 1, 576, dtype=torch.bfloat16)
        if kv == "bf16"
        else torch.zeros(slots, 1, 656, dtype=torch.uint8)
    )
    return [q, cache, torch.zeros(T, K, dtype=torch.int32), torch.zeros(T, dtype=torch.int32), 0.0625]


def test_validate_accepts_sglang_shapes():
    for kv in ("bf16", "fp8"):
        sz = api.validate(*_args(kv=kv), require_cuda=False)
        assert sz == {"T": 2, "H": 8, "topk": 16, "fp8": kv == "fp8"}
    a = _args(kv="fp8")
    a[1] = a[1].view(torch.float8_e4m3fn)
    assert api.validate(*a, require_cuda=False)["fp8"]


@pytest.mark.parametrize(
    "idx,bad,name",
    [
        (0, torch.zeros(2, 8, 576, dtype=torch.float16), "q_all"),
        (0, torch.zeros(2, 8, 512, dtype=torch.bfloat16), "q_all"),
        (0, torch.zeros(2, 129, 576, dtype=torch.bfloat16), "q_all"),
        (0, torch.zeros(2, 8, 1152, dtype=torch.bfloat16)[..., ::2], "q_all"),
        (1, torch.zeros(10, 1, 576, dtype=torch.float16), "kv_cache"),
        (1, torch.zeros(10, 1, 600, dtype=torch.uint8), "kv_cache"),
        (1, torch.zeros(10, 2, 576, dtype=torch.bfloat16), "kv_cache"),
        (1, torch.zeros(0, 1, 576, dtype=torch.bfloat16), "kv_cache"),
        (2, torch.zeros(2, 16, dtype=torch.int64), "page_table_1"),
        (2, torch.zeros(3, 16, dtype=torch.int32), "page_table_1"),
        (2, torch.zeros(16, 2, dtype=torch.int32).T, "page_table_1"),
        (3, torch.zeros(2, dtype=torch.int64), "seq_lens"),
        (3, torch.zeros(3, dtype=torch.int32), "seq_lens"),
        (4, float("nan"), "sm_scale"),
        (4, -1.0, "sm_scale"),
        (4, True, "sm_scale"),
        (4, "0.1", "sm_scale"),
    ],
)
def test_validate_names_the_bad_argument(idx, bad, name):
    a = _args()
    a[idx] = bad
    with pytest.raises(ValueError, match=f"^{name}:"):
        api.validate(*a, require_cuda=False)


def test_validate_out_and_lse():
    a = _args()
    with pytest.raises(ValueError, match="^out:"):
        api.validate(*a, out=torch.zeros(2, 8, 576, dtype=torch.bfloat16), require_cuda=False)
    with pytest.raises(ValueError, match="^lse:"):
        api.validate(*a, lse=torch.zeros(2, 8, dtype=torch.float64), require_cuda=False)
    with pytest.raises(ValueError, match="^q_all: must be a CUDA tensor"):
        api.validate(*a)


def test_why_unsupported_never_raises():
    a = _args()
    a[2] = "nope"
    assert "page_table_1" in api.why_unsupported(*a)
    assert not api.supports(*a)


# ---- split plan (host-only: depends on T, H, topk, device) ----
def test_split_plan_bounds():
    for T in (1, 4, 8, 32, 64, 256, 1024):
        for H in (8, 16, 64, 128):
            for cfg in tiles.CONFIGS.values():
                S, chunk = api.split_plan(T, H, 2048, 132, 2, cfg)
                assert 1 <= S <= api.MAX_SPLITS and chunk % cfg.block_n == 0
                assert (S - 1) * chunk < 2048 <= S * chunk  # every split non-empty by position
    S, _ = api.split_plan(4, 8, 2048, 132, 2, tiles.M16)
    assert S > 1  # small T splits the list
    assert api.split_plan(1024, 8, 2048, 132, 2, tiles.M16)[0] == 1
    assert api.workspace_numel(1, 4, 8) == 0 and api.workspace_numel(4, 4, 8) == 4 * 4 * 8 * 513


def test_tiles_fit_the_arch_limits():
    for arch, cfgs in tiles.ARCH_CONFIGS.items():
        for c in cfgs:
            for fp8 in (False, True):
                assert c.smem_bytes(fp8) <= tiles.SMEM_LIMIT[arch], (arch, c.name, fp8)
    assert tiles.default_config("sm_120a", 64) is tiles.M32 and tiles.default_config("sm_90a", 8) is tiles.M16
    assert tiles.config_for_mangled("_ZN4dsav23dsa_verify_split_kernelINS_3CfgILi16ELi32ELi2ELb1EEEEEvNS_6ParamsE") == (
        tiles.M16,
        True,
    )


def _fake_plan(monkeypatch, arch="sm_90a", sms=132, clusters=8):
    """resolve_full with no GPU: device_info, the module and its occupancy queries stubbed."""
    from dsa_verify import _build

    occ = {
        "m16": 2,
        "m32": 2,
        "m64": 1,
        "m16d": 1,
        "m16w": 1,
        "n8": 1,
        "n8s": 2,
        "n8w": 1,
        "n8r": 1,
        "n8rw": 1,
        "w64": 1,
    }
    monkeypatch.setattr(api, "device_info", lambda dev: (arch, sms))
    monkeypatch.setattr(_build, "load", lambda a: object())
    monkeypatch.setattr(api, "_ctas_per_sm", lambda mod, dev, cfg, fp8: occ[cfg.name])
    monkeypatch.setattr(api, "_max_clusters", lambda mod, dev, cfg, fp8, size: clusters)
    return lambda *a, **k: api.resolve_full(torch.device("cpu"), *a, **k)


def test_plan_small_t(monkeypatch):
    plan = _fake_plan(monkeypatch)
    # headline B=1 n=4 H=8, auto: m16, 32 splits, combine kernel (AUTO_M16W is off)
    _, cfg, S, chunk, _, cluster = plan(8, 2048, 4, False)
    assert (cfg.name, S, chunk, cluster) == ("m16", 32, 64, 0)
    # with AUTO_M16W: m16w, one 64-position tile per split (32 splits)
    monkeypatch.setattr(api, "AUTO_M16W", True)
    _, cfg, S, chunk, _, cluster = plan(8, 2048, 4, False)
    assert (cfg.name, S, chunk, cluster) == ("m16w", 32, 64, 0)
    # T=8 bf16: n8 (8 heads in the mma N) with its own plan: 16 splits of 128 positions (two tiles)
    _, cfg, S, chunk, _, cluster = plan(8, 2048, 8, False)
    assert (cfg.name, S, chunk, cluster) == ("n8", 16, 128, 0)
    monkeypatch.setattr(api, "AUTO_M16W", False)
    # a named config keeps split_plan's choice
    assert plan(8, 2048, 4, False, "m16")[1:3] == (tiles.M16, 32)
    # cluster on request: the plan rounded down to a power of two <= 16
    _, cfg, S, _, _, cluster = plan(8, 2048, 4, False, "m16", None, "cluster")
    assert (cfg.name, S, cluster) == ("m16", 16, 16)
    _, cfg, S, _, _, cluster = plan(8, 2048, 32, False, "auto", None, "cluster")
    assert (cfg.name, S, cluster) == ("m16", 8, 8)
    # T=256: one split, nothing to merge
    assert plan(8, 2048, 256, False)[2] == 1


def test_plan_picks_heads_in_n_configs_up_to_8_heads(monkeypatch):
    plan = _fake_plan(monkeypatch)
    # bf16: n8 from 8 rows, n8w (7 warps) from 64 rows (H200: 0.80x / 0.74x n8's time at T=64 / 256)
    assert plan(8, 2048, 256, False)[1].name == "n8w"
    assert plan(8, 2048, 64, False)[1].name == "n8w"
    assert plan(8, 2048, 32, False)[1].name == "n8w"  # 0.865x n8's time at T=32
    assert plan(8, 2048, 16, False)[1].name == "n8"  # T=16: n8w 0.985x, not worth a switch
    assert plan(8, 2048, 8, False)[1].name == "n8"
    assert plan(8, 2048, 4, False)[1].name == "m16"  # B=1 n=4: m16 (n8 1.09x slower)
    # fp8: m16w at B=1 while its grid (32 splits of 64 positions) fits one wave, else n8 below 8 rows;
    # n8r (e4m3 in registers) from 8 rows (H200: 0.82x n8 at T=8, 0.80x / 0.74x n8w at T=64 / 256)
    _, cfg, S, chunk, _, _ = plan(8, 2048, 4, True)
    assert (cfg.name, S, chunk) == ("m16w", 32, 64)
    assert plan(8, 2048, 6, True)[1].name == "n8"  # 6 x 32 m16w CTAs > 132 SMs: n8
    assert [plan(8, 2048, T, True)[1].name for T in (8, 16, 64, 256, 1024)] == ["n8r"] * 5
    assert plan(16, 2048, 64, True)[1].name == "w64"  # n8r holds 8 heads; H=16 from T=8: w64 (below)
    with pytest.raises(ValueError, match="fp8"):
        plan(8, 2048, 64, False, "n8r")  # no bf16 kernel
    assert plan(16, 2048, 64, False)[1].name == "w64"  # H=16: not two n8 head tiles (KV read twice)
    assert plan(8, 2048, 64, False, "auto", None, "cluster")[1].name == "m16"  # n8 has no cluster merge
    assert plan(16, 2048, 4, True)[1].name == "m16"  # H=16 fp8: not measured with m16w
    # n8w: one 112-position tile per split at most; T=64 takes 2 splits of 1120 positions
    _, cfg, S, chunk, _, _ = plan(8, 2048, 64, False)
    assert (cfg.name, S, chunk) == ("n8w", 2, 1120)
    sm120 = _fake_plan(monkeypatch, arch="sm_120a")
    assert sm120(8, 2048, 64, False)[1].name == "m16"  # not measured there
    # fp8: n8rw from T=8 (n8r is sm_90a only); below and for H > 8, m16
    assert [sm120(8, 2048, T, True)[1].name for T in (4, 7, 8, 64, 256)] == ["m16", "m16", "n8rw", "n8rw", "n8rw"]
    assert sm120(16, 2048, 64, True)[1].name == "m16"
    with pytest.raises(ValueError, match="fp8"):
        sm120(8, 2048, 64, False, "n8rw")  # no bf16 kernel
    # n8rw's own plan at T=4 rounds 2048 / 18 up to two 112-position tiles per split (S=10, 40 CTAs);
    # an explicit 19 gives one tile each (the A/B the notes name)
    assert sm120(8, 2048, 4, True, "n8rw")[2:4] == (10, 224)
    assert sm120(8, 2048, 4, True, "n8rw", 19)[2:4] == (19, 112)


def test_plan_picks_the_wgmma_config_above_16_heads_on_sm90a(monkeypatch):
    plan = _fake_plan(monkeypatch)
    # H200 session 10: w64 0.39-0.71x m64's time at H=32 / 64 / 128 (T=4..256) on a bf16 cache;
    # session 11: 0.46-0.72x on the fp8 cache
    for fp8 in (False, True):
        assert [plan(H, 2048, T, fp8)[1].name for H in (17, 32, 64, 128) for T in (4, 64, 256)] == ["w64"] * 12
        # H=16 (session 14, w64 / m16): w64 from 8 rows (0.91-0.96, bf16 T=16 1.004), m16 below (1.13-1.16)
        assert [plan(16, 2048, T, fp8)[1].name for T in (4, 7, 8, 16, 64, 256)] == ["m16"] * 2 + ["w64"] * 4
        assert plan(15, 2048, 64, fp8)[1].name == "m16"  # H = 9..15 not measured
        assert plan(16, 2048, 64, fp8, "auto", None, "cluster")[1].name == "m16"  # w64 has no cluster merge
        assert plan(64, 2048, 256, fp8)[2] == 1 and plan(64, 2048, 4, fp8)[2:4] == (16, 128)
    assert plan(64, 2048, 64, True, "m64")[1].name == "m64"  # named: m64 still serves either cache
    assert _fake_plan(monkeypatch, arch="sm_120a")(64, 2048, 64, False)[1].name == "m32"  # no wgmma there


def test_combine_kernel_is_wide_from_512_row_head_pairs_and_can_be_forced():
    # H200 session 12: the wide combine 0.59-0.97x the sliced one's time at T x H >= 512, 1.07-1.97x
    # at 256 and 32 (B=1 n=4 H=64 and H=8)
    assert api.COMBINE_WIDE_MIN_ROWS == 512
    assert not api.combine_wide(4, 64) and not api.combine_wide(4, 8)  # B=1 n=4: sliced
    assert api.combine_wide(8, 64) and api.combine_wide(64, 64) and api.combine_wide(64, 8)
    assert not api.combine_wide(64, 64, "sliced") and api.combine_wide(4, 8, "wide")
    assert api.combine_wide(64, 64, "kernel") and not api.combine_wide(4, 8, "kernel")
    # the trace holds 8 words per CTA: sliced 4 CTAs per (row, head), wide one per 4 pairs
    w = tiles.W64
    assert api.trace_numel(64, 64, 2, w) == 8 * (64 * 2 + 64 * 64 * 4)
    assert api.trace_numel(64, 64, 2, w, wide=True) == 8 * (64 * 2 + 64 * 64 // 4)
    assert api.trace_numel(3, 1, 2, w, wide=True) == 8 * (3 * 2 + 1)
    assert api.trace_numel(64, 64, 1, w, wide=True) == 8 * 64  # no split: no combine CTAs


def test_cluster_plan_refusals(monkeypatch):
    plan = _fake_plan(monkeypatch, arch="sm_120a")
    _, cfg, _, _, _, cluster = plan(8, 2048, 4, False)
    assert cfg.name == "m16" and cluster == 0  # sm_120a: m16 and the combine kernel
    with pytest.raises(ValueError, match="combine"):
        plan(8, 2048, 4, False, "auto", None, "cluster")
    plan = _fake_plan(monkeypatch)
    with pytest.raises(ValueError, match="combine"):
        plan(64, 2048, 4, False, "auto", None, "cluster")  # m64 has no cluster path
    with pytest.raises(ValueError, match="combine"):
        plan(8, 2048, 4, False, "m16", 12, "cluster")  # 12 splits: not a power of two
    assert plan(8, 2048, 4, False, "m16", 8, "cluster")[5] == 8
    with pytest.raises(ValueError, match="combine"):
        plan(8, 2048, 4, False, "m16", None, "bogus")
    plan = _fake_plan(monkeypatch, clusters=0)
    with pytest.raises(ValueError, match="combine"):
        plan(8, 2048, 4, False, "m16", 8, "cluster")  # the size cannot launch


def test_parity_config_labels():
    from verify_tools import dsa_parity

    labels = dsa_parity.configs_for("sm_90a", "all")
    assert labels == [
        "auto", "m16", "m16/cluster", "m32", "m64", "m16d", "m16d/cluster", "m16w", "m16w/cluster", "n8", "n8s",
        "n8w", "n8r", "n8rw", "w64", "auto/sliced", "auto/wide",
    ]  # fmt: skip
    assert dsa_parity.configs_for("sm_120a", "all") == [
        "auto", "m16", "m32", "n8s", "n8rw", "auto/sliced", "auto/wide",
    ]  # fmt: skip
    assert dsa_parity.configs_for("sm_90a", "n8,m16/cluster") == ["n8", "m16/cluster"]
    with pytest.raises(ValueError, match="m64"):
        dsa_parity.configs_for("sm_120a", "m64")  # not built for sm_120a
    assert dsa_parity.call_kwargs("m16/cluster") == {"tile_config": "m16", "combine": "cluster"}
    assert dsa_parity.call_kwargs("auto") == {"tile_config": "auto", "combine": "auto"}
    assert dsa_parity.call_kwargs("auto/wide") == {"tile_config": "auto", "combine": "wide"}
    split, n8 = "_ZN4dsav23dsa_verify_split_kernelINS_3Cfg", "_ZN4dsav20dsa_verify_n8_kernelINS_4CfgN"
    mangled = {
        split + "ILi16ELi32ELi4ELb0ELi0EEEEEvNS_6ParamsE": (tiles.M16D, False),
        split + "ILi16ELi64ELi2ELb1ELi8EEEEEvNS_6ParamsE": (tiles.M16W, True),
        # CfgN<WARPS, STAGES, FP8, REG>: the defaulted argument is part of the real names
        n8 + "ILi4ELi2ELb1ELb0EEEEEvNS_6ParamsE": (tiles.N8, True),
        n8 + "ILi2ELi2ELb0ELb0EEEEEvNS_6ParamsE": (tiles.N8S, False),
        n8 + "ILi7ELi1ELb1ELb0EEEEEvNS_6ParamsE": (tiles.N8W, True),
        n8 + "ILi8ELi2ELb1ELb1EEEEEvNS_6ParamsE": (tiles.N8R, True),
        n8 + "ILi2ELi2ELb1ELb1EEEEEvNS_6ParamsE": (tiles.N8RS, True),
        n8 + "ILi7ELi1ELb1ELb1EEEEEvNS_6ParamsE": (tiles.N8RW, True),
        "_ZN4dsav23dsa_verify_wgmma_kernelINS_4CfgWILb0EEEEEvNS_6ParamsE": (tiles.W64, False),
        "_ZN4dsav23dsa_verify_wgmma_kernelINS_4CfgWILb1EEEEEvNS_6ParamsE": (tiles.W64, True),
    }
    for name, want in mangled.items():
        assert tiles.config_for_mangled(name) == want, name
    assert tiles.config_for_mangled(n8 + "ILi5ELi3ELb1ELb0EEEEEvNS_6ParamsE") is None  # no such config
    # the split-PV configs: n8's kernel template over CfgX<WARPS, STAGES, FP8> (n8x, n8x8 bf16; n8xr, n8xrs fp8)
    n8x = "_ZN4dsav20dsa_verify_n8_kernelINS_4CfgXILi4ELi2ELb0EEEEEvNS_6ParamsE"
    assert tiles.config_for_mangled(n8x) == (tiles.N8X, False)
    assert tiles.config_for_mangled(n8x.replace("ILi4ELi2ELb0", "ILi8ELi1ELb0")) == (tiles.N8X8, False)
    assert tiles.config_for_mangled(n8x.replace("ILi4ELi2ELb0", "ILi4ELi2ELb1")) == (tiles.N8XR, True)
    assert tiles.config_for_mangled(n8x.replace("ILi4ELi2ELb0", "ILi4ELi1ELb1")) == (tiles.N8XRS, True)
    assert tiles.config_for_mangled(n8x.replace("ILi4ELi2ELb0", "ILi8ELi2ELb0")) is None  # no such config


def _fake_cuda_device(monkeypatch, arch: str, sms: int):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda dev: "fake")
    monkeypatch.setattr(api, "device_info", lambda dev: (arch, sms))


def test_parity_order_and_partial_out(monkeypatch, tmp_path):
    """Quick cases, then their graph replays, then the rest; --out rewritten after every case."""
    import json

    from verify_tools import dsa_parity

    _fake_cuda_device(monkeypatch, "sm_120a", 84)
    monkeypatch.setattr(dsa_parity, "lm_head", lambda dev: None)
    out = tmp_path / "parity.json"
    seen = []

    def fake_case(spec, cfg, w, device, peer=None):
        if seen:  # the partial document holds every case run so far
            assert len(json.loads(out.read_text())["cases"]) == len(seen)
        seen.append((spec.name, cfg))
        return {"case": spec.name, "config": cfg, "ok": True}

    def fake_graph(spec, cfg, w, device):
        seen.append((spec.name + "_graph", cfg))
        return {"case": spec.name + "_graph", "config": cfg, "ok": True, "graph": True}

    monkeypatch.setattr(dsa_parity, "run_case", fake_case)
    monkeypatch.setattr(dsa_parity, "graph_case", fake_graph)
    assert dsa_parity.main(["--json", "--no-peer", "--out", str(out)]) == 0
    names = [n for n, _ in seen]
    cfgs = dsa_parity.configs_for("sm_120a", "all")
    by_name = {c.name: c for c in dsa_parity.CASES}

    def runs(case_names):  # (case, config) pairs that run: an fp8-only config skips bf16 cases
        return sum(1 for n in case_names for c in cfgs if by_name[n].kv == "fp8" or c != "n8rw")

    q, g = runs(dsa_parity.QUICK), runs(dsa_parity.GRAPH_CASES)
    assert set(names[:q]) == set(dsa_parity.QUICK)
    assert all(n.endswith("_graph") for n in names[q : q + g])
    assert len(seen) == runs(list(by_name)) + g
    doc = json.loads(out.read_text())
    assert doc["ok"] and doc["summary"]["total"] == len(seen)
    bf16_cases = [n for n in by_name if by_name[n].kv != "fp8"]
    assert sorted((s["case"], s["config"]) for s in doc["skipped"]) == sorted(
        [(n, "n8rw") for n in bf16_cases] + [(n, "n8rw") for n in dsa_parity.GRAPH_CASES if n in bf16_cases]
    )


def test_parity_under_the_sm120_emulation_runs_sm120_configs(monkeypatch, tmp_path):
    """--sm120-occupancy on an sm_90a device: the emulation is switched on once, before any case, and the
    suite runs sm_120a's configs (what a Blackwell host would), its document saying so."""
    import json

    from verify_tools import dsa_parity

    _fake_cuda_device(monkeypatch, "sm_90a", 132)
    monkeypatch.setattr(dsa_parity, "lm_head", lambda dev: None)
    events = []
    monkeypatch.setattr(api, "emulate_sm120_occupancy", lambda dev: events.append("emulate"))

    def fake_case(spec, cfg, w, device, peer=None):
        events.append(cfg)
        return {"case": spec.name, "config": cfg, "ok": True}

    monkeypatch.setattr(dsa_parity, "run_case", fake_case)
    out = tmp_path / "p.json"
    argv = ["--json", "--no-peer", "--no-graph", "--sm120-occupancy", "--cases", "dsv32_b1_n4_h16_L32k_fp8"]
    assert dsa_parity.main(argv + ["--out", str(out)]) == 0
    assert events == ["emulate"] + dsa_parity.configs_for("sm_120a", "all")
    doc = json.loads(out.read_text())
    assert doc["arch"] == "sm_120a" and doc["sm120_occupancy"] is True


def test_parity_sm120_emulation_is_refused_off_hopper(monkeypatch, capsys):
    """The emulation pads Hopper's shared memory: on any other arch the run is blocked (exit 75), no case runs."""
    import json

    from tool_contract import EXIT_BLOCKED
    from verify_tools import dsa_parity

    _fake_cuda_device(monkeypatch, "sm_120a", 84)
    monkeypatch.setattr(dsa_parity, "run_case", lambda *a, **k: pytest.fail("a case ran"))
    assert dsa_parity.main(["--json", "--no-peer", "--sm120-occupancy"]) == EXIT_BLOCKED
    doc = json.loads(capsys.readouterr().out)
    assert "sm_90a devices only" in doc["blocked"] and doc["summary"]["total"] == 0


def test_trace_timeline_summary():
    """The DSAV_TRACE words -> phase times, exact at ns-since-epoch magnitudes."""
    from verify_tools.dsa_bench import _timeline

    base = 1_760_000_000_000_000_000  # ~2025 in ns: beyond a double's exact integers
    rows = []
    for c in range(4):  # split CTAs: entry, index in, first tile, computed, end, smid, ntiles
        e = base + 100 * c
        rows.append([e, e + 1000, e + 2500, e + 4000 + c, e + 4500, c % 2, 2, 0])
    rows.append([base + 50, 0, 0, 0, base + 60, 1, 0, 0])  # an early exit (no prologue)
    rows += [[base + 10, base + 4900, base + 5400, 0, 0, 0, 0, 0]] * 2  # combine CTAs
    t = _timeline(torch.tensor(rows, dtype=torch.int64).reshape(-1), 5, 2)
    assert t["entry_spread_us"] == pytest.approx(0.3)
    assert t["index_med_us"] == pytest.approx(1.0) and t["first_tile_max_us"] == pytest.approx(1.5)
    assert t["compute_max_us"] == pytest.approx(1.503)
    assert t["split_end_us"] == pytest.approx(4.8)
    assert t["sms_used"] == 2 and t["max_ctas_per_sm"] == 3
    assert t["combine_release_after_split_end_us"] == pytest.approx(0.1)
    assert t["combine_end_us"] == pytest.approx(5.4)


# ---- build check: nvcc + ptxas, both arches, 0 spills ----
def test_parse_ptxas_sample():
    name = "_ZN4dsav23dsa_verify_split_kernelINS_3CfgILi32ELi16ELi3ELb0EEEEEvNS_6ParamsE"
    text = (
        f"ptxas info    : Compiling entry function '{name}' for 'sm_120a'\n"
        f"ptxas info    : Function properties for {name}\n"
        "    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n"
        "ptxas info    : Used 240 registers, used 1 barriers, 16 bytes smem\n"
    )
    k = parse_ptxas(text)[0]
    assert (k["registers"], k["spill_store_bytes"], k["stack_bytes"], k["static_smem_bytes"]) == (240, 4, 8, 16)


@pytest.mark.parametrize("arch", ["sm_90a", "sm_120a"])
def test_build_check_compiles_without_spills(arch, nvcc_path):
    doc = dsa_build(arch, nvcc_path)
    assert doc["ok"], doc["errors"]
    assert doc["summary"]["spill_bytes"] == 0
    names = {(k["tile_config"], k["fp8"]) for k in doc["kernels"] if k["tile_config"]}
    assert names == {(c.name, f) for c in tiles.ARCH_CONFIGS[arch] for f in c.kv_kinds}
    assert ("n8r", False) not in names, "n8r is fp8 only"
    assert all(k["smem_bytes"] <= tiles.SMEM_LIMIT[arch] for k in doc["kernels"])
    assert len(doc["kernels"]) == len(names) + 2  # + the sliced and the wide combine kernels
    combines = sorted(k["name"] for k in doc["kernels"] if not k["tile_config"])
    assert ["combine_kernel" in combines[0], "combine_wide_kernel" in combines[1]] == [True, True], combines
    assert not names & {(n, f) for n in tiles.EXPERIMENTAL_CONFIGS for f in (False, True)}, "phase 0's build"


def test_experimental_build_adds_its_configs_without_spills(nvcc_path):
    doc = dsa_build("sm_90a", nvcc_path, experimental=True)
    assert doc["ok"], doc["errors"]
    got = {(k["tile_config"], k["fp8"]): k for k in doc["kernels"] if k["tile_config"] in tiles.EXPERIMENTAL_CONFIGS}
    # n8rs, n8xr, n8xrs: fp8 only; n8x, n8x8: bf16 only
    assert set(got) == {("n8rs", True), ("n8x", False), ("n8x8", False), ("n8xr", True), ("n8xrs", True)}
    for (name, fp8), k in got.items():
        cfg = tiles.EXPERIMENTAL_CONFIGS[name]
        assert k["spill_bytes"] == 0 and k["smem_bytes"] == cfg.smem_bytes(fp8) <= tiles.SMEM_LIMIT["sm_90a"]
        # all its warps on one SM: at most 65536 / threads registers per thread
        assert k["registers"] <= min(255, 65536 // cfg.threads), name
    # n8rs: within sm_120a's 99 KiB per block, but one CTA (2 warps) per sm_120 SM
    assert tiles.N8RS.smem_bytes(True) <= tiles.SMEM_LIMIT["sm_120a"] and tiles.sm120_ctas_per_sm(tiles.N8RS, True) == 1
    # n8x: 4 warps of 16 positions; with the dims split 4 ways a warp holds 32 O^T accumulators, not n8's 128
    # (n8x8: 16)
    assert all(got[k]["registers"] < 168 for k in got if k[0].startswith("n8x"))
    # n8xrs: one stage of raw fp8 rows, within sm_120a's 99 KiB per block
    assert tiles.N8XRS.smem_bytes(True) <= tiles.SMEM_LIMIT["sm_120a"]


@pytest.mark.parametrize("arch", ["sm_90a", "sm_120a"])
def test_binding_smem_bytes_match_tiles_for_every_config(arch, nvcc_path, tmp_path):
    """The C++ byte counts (Cfg / CfgN / CfgX / CfgW ::bytes, as the binding's config_smem_bytes answers
    them) equal tiles.py's for every config of the arch's build, the experimental ones included, and
    both cache kinds (0 where a config has no kernel). A host program over the launch unit, compiled to
    PTX only (no ptxas): the GPU test checks the shipped library the same way."""
    import subprocess

    from dsa_verify._build import CSRC

    probe = tmp_path / "smem_probe.cu"
    probe.write_text(
        '#include "dsa_verify.cu"\n#include <cstdio>\nint main() {\n'
        "  for (int c = 0; c < 32; ++c)\n"
        '    for (int f = 0; f < 2; ++f) std::printf("%d %d %d\\n", c, f, dsav::config_smem_bytes(c, f != 0));\n'
        "  return 0;\n}\n"
    )
    cc = arch.removeprefix("sm_")
    flags = [f"-DDSAV_BUILD_CFG90={int(arch == 'sm_90a')}", f"-DDSAV_EXPERIMENTAL={int(arch == 'sm_90a')}"]
    exe = tmp_path / "smem_probe"
    ptx_only = f"-gencode=arch=compute_{cc},code=compute_{cc}"
    cmd = [nvcc_path, "-std=c++17", ptx_only, *flags, f"-I{CSRC}", "-o", str(exe), str(probe)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=600)
    got = {}
    for line in subprocess.run([exe], check=True, capture_output=True, text=True).stdout.split("\n"):
        if line:
            c, f, b = map(int, line.split())
            got[(c, bool(f))] = b
    every = list(tiles.ARCH_CONFIGS[arch]) + (list(tiles.EXPERIMENTAL_CONFIGS.values()) if arch == "sm_90a" else [])
    want = {(c.index, f): c.smem_bytes(f) for c in every for f in (False, True)}
    assert {k: got[k] for k in want} == want
    assert all(b == 0 for k, b in got.items() if k not in want), "a kernel tiles.py does not list"


def test_parity_and_bench_skip_the_cache_kinds_a_config_has_no_kernel_for():
    has_kernel = tiles.has_kernel
    assert has_kernel("n8x", False) and not has_kernel("n8x", True)  # bf16 only
    assert has_kernel("n8xr", True) and not has_kernel("n8xr", False)  # fp8 only
    assert has_kernel("n8r", True) and not has_kernel("n8r", False)
    assert all(has_kernel(name, f) for name in ("auto", "m16", "m16/cluster", "w64") for f in (False, True))


def test_sm120_ctas_per_sm_follow_its_100_kb_sm():
    # every config sm_120a builds holds one CTA per 100 KB SM (1 KB reserved per block): their
    # warps per CTA are the SM's; m64 (181-190 KB) does not fit an sm_120 SM at all
    for cfg in tiles.ARCH_CONFIGS["sm_120a"]:
        for fp8 in cfg.kv_kinds:
            assert tiles.sm120_ctas_per_sm(cfg, fp8) == 1, (cfg.name, fp8)
    assert tiles.sm120_ctas_per_sm(tiles.M64, True) == 0
    assert tiles.sm120_ctas_per_sm(tiles.N8R, False) == 0, "no bf16 kernel"
    small = tiles.TileConfig("probe", 99, 8, 16, 1, 1, kind="n8", reg=True)  # 29 KB: three per SM
    assert tiles.sm120_ctas_per_sm(small, True) == 102400 // (small.smem_bytes(True) + 1024) == 3


def test_sm120_occupancy_emulation_plans_by_sm120a_rules(monkeypatch):
    from dsa_verify import _build

    loaded = []
    monkeypatch.setattr(_build, "load_experimental", lambda a: loaded.append(a) or object())
    plan = _fake_plan(monkeypatch)
    monkeypatch.setattr(api, "_ctas_per_sm", lambda mod, dev, cfg, fp8: 1)
    monkeypatch.setattr(api, "_SM120_OCCUPANCY", True)
    # auto: sm_120a's m16 / n8rw where sm_90a would take m16w / n8r; every kernel from the experimental build
    assert [plan(8, 2048, T, True)[1].name for T in (4, 64, 256)] == ["m16", "n8rw", "n8rw"]
    assert plan(64, 2048, 64, False)[1].name == "m32"
    assert loaded and set(loaded) == {"sm_90a"}
    assert plan(8, 2048, 64, True, "n8rs")[1].name == "n8rs"
    with pytest.raises(ValueError, match="not built for sm_120a"):
        plan(8, 2048, 64, True, "n8r")
    with pytest.raises(ValueError, match="cluster"):
        plan(8, 2048, 4, False, "m16", combine="cluster")


def test_sm120_occupancy_emulation_needs_an_sm90a_device(monkeypatch):
    monkeypatch.setattr(api, "device_info", lambda dev: ("sm_120a", 188))
    with pytest.raises(ValueError, match="sm_90a devices only"):
        api.emulate_sm120_occupancy(torch.device("cpu"))
    assert api._SM120_OCCUPANCY is False


def test_experimental_configs_are_reachable_by_name_only(monkeypatch):
    from dsa_verify import _build
    from verify_tools import dsa_parity

    loaded = []
    monkeypatch.setattr(_build, "load_experimental", lambda a: loaded.append(a) or object())
    plan = _fake_plan(monkeypatch)
    monkeypatch.setattr(api, "_ctas_per_sm", lambda mod, dev, cfg, fp8: 1)
    exp = set(tiles.EXPERIMENTAL_CONFIGS)
    assert exp == {"n8rs", "n8x", "n8x8", "n8xr", "n8xrs"}
    assert all(plan(8, 2048, T, f)[1].name not in exp for T in (1, 4, 8, 64, 256) for f in (False, True))  # never auto
    assert loaded == []
    _, cfg, S, chunk, _, _ = plan(8, 2048, 64, True, "n8rs")
    assert (cfg.name, S, chunk) == ("n8rs", 2, 1024) and loaded == ["sm_90a"]  # 32 tiles of 32 positions
    with pytest.raises(ValueError, match="fp8"):
        plan(8, 2048, 64, False, "n8rs")
    _, cfg, S, chunk, _, _ = plan(8, 2048, 4, False, "n8x", num_splits=32)
    assert (cfg.name, S, chunk) == ("n8x", 32, 64)  # the B=1 headline: one 64-position tile per split
    with pytest.raises(ValueError, match="bf16 .* cache only"):
        plan(8, 2048, 4, True, "n8x")
    # n8x8: 128-position tiles, so 32 splits asked become 16 of one tile each
    assert plan(8, 2048, 4, False, "n8x8", num_splits=32)[1:4] == (tiles.N8X8, 16, 128)
    assert plan(8, 2048, 4, True, "n8xr", num_splits=32)[1:4] == (tiles.N8XR, 32, 64)  # its fp8 form
    with pytest.raises(ValueError, match="fp8"):
        plan(8, 2048, 4, False, "n8xr")
    with pytest.raises(ValueError, match="sm_90a only"):
        _fake_plan(monkeypatch, arch="sm_120a")(8, 2048, 64, True, "n8rs")
    assert not exp & set(dsa_parity.configs_for("sm_90a", "all"))
    assert dsa_parity.configs_for("sm_90a", "auto,n8rs") == ["auto", "n8rs"]
    with pytest.raises(ValueError, match="n8rs"):
        dsa_parity.configs_for("sm_120a", "n8rs")


# ---- prebuilt library (services never compile) ----
def test_prebuilt_only_mode_never_compiles(tmp_path, monkeypatch):
    from dsa_verify import _build

    monkeypatch.setenv("MLA_VERIFY_BUILD_DIR", str(tmp_path))
    monkeypatch.setenv("MLA_VERIFY_PREBUILT_ONLY", "1")
    monkeypatch.setattr(_build, "load_jit", lambda arch: pytest.fail("compiled in prebuilt-only mode"))
    with pytest.raises(_build.PrebuiltUnavailable, match="missing"):
        _build.load("sm_90a")
    assert _build.prebuilt_dir("sm_90a") == tmp_path / "sm_90a" / "dsa_verify"


def test_prebuilt_record_is_checked(tmp_path, monkeypatch):
    import json as _json

    from dsa_verify import _build

    monkeypatch.setenv("MLA_VERIFY_BUILD_DIR", str(tmp_path))
    d = _build.prebuilt_dir("sm_120a")
    d.mkdir(parents=True)
    lib = d / _build.LIBRARY_NAME
    lib.write_bytes(b"not a library")
    rec = {"arch": "sm_120a", "source_hash": _build.source_hash("sm_120a"), "sha256": "0" * 64}
    (d / _build.RECORD_NAME).write_text(_json.dumps(rec))
    with pytest.raises(_build.PrebuiltUnavailable, match="hash mismatch"):
        _build.check_prebuilt("sm_120a")
    rec["source_hash"] = "stale"
    (d / _build.RECORD_NAME).write_text(_json.dumps(rec))
    with pytest.raises(_build.PrebuiltUnavailable, match="other sources"):
        _build.check_prebuilt("sm_120a")
    rec.update(source_hash=_build.source_hash("sm_120a"), sha256=_build.sha256_file(lib), python="0.0")
    (d / _build.RECORD_NAME).write_text(_json.dumps(rec))
    with pytest.raises(_build.PrebuiltUnavailable, match="python"):
        _build.check_prebuilt("sm_120a")


# ---- FlashMLA sparse peer (dsa_bench.flashmla_*) and the summary block (the peer ran on the H200 in
# DSA run 10): these check the argument construction (what SGLang 0.5.23 passes) and the skip path.
def _fake_flashmla_sparse(calls):
    import types

    class Sched:
        def __init__(self, tile_scheduler_metadata=None, num_splits=None):
            self.tile_scheduler_metadata, self.num_splits = tile_scheduler_metadata, num_splits

    def meta(*a, **k):
        calls.append(("meta", a, k))
        return torch.zeros(1, 8, dtype=torch.int32), torch.zeros(2, dtype=torch.int32)

    def decode(q, k_cache, block_table, cache_seqlens, head_dim_v, sched, **k):
        calls.append(("decode", q, k_cache, block_table, k))
        return torch.zeros(*q.shape[:3], head_dim_v), None

    def prefill(q, kv, indices, sm_scale, d_v=512, attn_sink=None, topk_length=None, **k):
        calls.append(("prefill", q, kv, indices, topk_length, k))
        return torch.zeros(*q.shape[:2], d_v), None, None

    return types.SimpleNamespace(
        get_mla_decoding_metadata=meta,
        flash_mla_with_kvcache=decode,
        flash_mla_sparse_fwd=prefill,
        flash_mla_interface=types.SimpleNamespace(FlashMLASchedMeta=Sched),
    )


@pytest.mark.parametrize("kv", ["bf16", "fp8"])
def test_flashmla_sparse_args_are_what_sglang_passes(kv):
    from verify_tools import dsa_bench as db

    d = make_inputs(DsaCase("fm", (300, 90), 3, 8, kv=kv, seed=2, poison=False), "cpu")
    q, cache, pt, sl = d["q_all"], d["kv_cache"], d["page_table_1"], d["seq_lens"]
    T = q.shape[0]
    args = db.flashmla_args(q, cache, pt, sl, kv)
    qp = args["q"].reshape(T, 64, 576)
    assert torch.equal(qp[:, :8], q) and not qp[:, 8:].any(), "heads zero-padded to 64 (SGLang's rule)"
    assert args["indices"].shape == (T, 1, 2048) and args["indices"].dtype == torch.int32
    calls = []
    fn = db.flashmla_fn(_fake_flashmla_sparse(calls), args, 0.0625)
    assert db.flashmla_out(fn(), 8).shape == (T, 8, 512)
    if kv == "fp8":
        kc = args["kv_cache"]
        assert kc.shape == (cache.shape[0] // 64, 64, 1, 656) and kc.data_ptr() == cache.data_ptr(), "a view"
        s = pt[pt >= 0].long()
        assert torch.equal(kc[s // 64, s % 64, 0], cache[s, 0]), "index = page * 64 + offset = the slot id"
        assert args["q"].shape == (T, 1, 64, 576) and args["block_table"].shape == (T, 0)
        assert calls[0][1][1:] == (64, 1, 64, True, 2048) and calls[0][2] == {"use_legacy": True}
        k = calls[1][4]
        assert (
            k["kv_format"] == "V32" and k["is_fp8_kvcache"] and k["use_legacy"] and k["indices"].shape == (T, 1, 2048)
        )
    else:
        kind, q_in, kv_in, idx, tl, k = calls[0]
        assert kind == "prefill" and q_in.shape == (T, 64, 576) and kv_in.shape == (cache.shape[0], 1, 576)
        assert torch.equal(tl, sl) and k == {"use_legacy": True}


def test_flashmla_heads_and_fp8_page_check():
    from verify_tools import dsa_bench as db

    assert [db.flashmla_heads(h) for h in (8, 16, 64, 128)] == [64, 64, 64, 128]
    bad = torch.zeros(100, 1, 656, dtype=torch.uint8)  # 100 slots: not whole pages of 64
    with pytest.raises(ValueError):
        db.flashmla_args(torch.zeros(2, 8, 576), bad, torch.zeros(2, 2048, dtype=torch.int32), torch.ones(2), "fp8")


def test_dsa_bench_without_flashmla_records_the_reason(monkeypatch):
    import sys

    from verify_tools import dsa_bench as db
    from verify_tools.bench import import_flashmla

    monkeypatch.setitem(sys.modules, "flash_mla", None)
    fm, reason = import_flashmla(db.FLASHMLA_SPARSE_ARCHS, "FlashMLA's legacy sparse kernels")
    assert fm is None and "not importable" in reason
    doc = db.blocked_doc("no CUDA device")
    assert doc["ok"] is False and set(doc["summary"]) == set(db.SUMMARY_KEYS)
    assert all(v is None for v in doc["summary"].values()) and doc["flashmla"] is None


def test_dsa_summary_picks_shapes_by_key_and_names_the_fastest():
    from verify_tools import dsa_bench as db

    def row(B, L, n, H, kv, **kw):
        return {"B": B, "L": L, "n": n, "H": H, "kv": kv, **kw}

    rows = [
        row(32, 32768, 8, 8, "bf16", sol=0.72, fastest="sglang_triton"),
        row(1, 32768, 4, 8, "fp8", sol=0.1, fastest="ours_bf16"),
        row(1, 32768, 4, 8, "bf16", sol=0.2, speedup_vs_sglang_triton=0.88, ours_s=11.6e-6,
            sglang_triton={"s": 10.2e-6}, speedup_vs_flashmla=1.3, fastest="sglang_triton"),
        row(8, 32768, 8, 8, "fp8", fp8_over_bf16_time=1.48, fastest="ours_bf16"),
    ]  # fmt: skip
    s = db.summarize(rows)
    assert s["headline_speedup_vs_sglang_triton"] == 0.88 and s["headline_sol"] == 0.2
    assert s["headline_sglang_triton_s"] == 10.2e-6 and s["headline_speedup_vs_flashmla"] == 1.3
    assert s["t256_sol"] == 0.72 and s["t64_fp8_over_bf16_time"] == 1.48 and s["rows"] == 4
    assert s["fastest_per_shape"]["B32_L32768_n8_H8_bf16"] == "sglang_triton"
    assert set(s) == set(db.SUMMARY_KEYS)
    empty = db.summarize([])
    assert empty["headline_sol"] is None and empty["fastest_per_shape"] == {}


def test_dsa_bench_shapes_option_parses_and_refuses_bad_items():
    from verify_tools import dsa_bench as db

    assert db.parse_shapes("2:32768:8:8, 32:4096:8:64") == [(2, 32768, 8, 8), (32, 4096, 8, 64)]
    for bad in ("2:32768:8", "2:32768:8:x", "0:32768:8:8", "2:32768:8:8:1"):
        with pytest.raises(ValueError, match="B:L:n:H"):
            db.parse_shapes(bad)
    assert db.main(["--shapes", "1:2:3"]) == 2  # refused before torch or a device is touched
    with pytest.raises(SystemExit):  # argparse: the alt's combine kernel is auto, sliced or wide
        db.main(["--alt-combine", "cluster"])


def test_dsa_tree_ab_refuses_bad_arguments_before_any_device_work(capsys):
    from verify_tools import dsa_tree_ab as ta

    assert ta.parse_trees("base=/a/csrc,v2=/b/csrc") == {"base": "/a/csrc", "v2": "/b/csrc"}
    for bad in ("", ",", "base", "=/a", "base=", "cur=/a", "x=/a,x=/b"):
        with pytest.raises(ValueError):
            ta.parse_trees(bad)
    good = ["--trees", "base=/nowhere", "--shapes", "1:32768:4:16"]
    for args, what in (
        (["--trees", "cur=/a", "--shapes", "1:32768:4:16"], "cur"),
        (["--trees", "base=/a", "--shapes", "1:2:3"], "B:L:n:H"),
        (good + ["--configs", "m16,bogus"], "bogus"),
        (good + ["--kv", "int4"], "--kv"),
        (good + ["--reps", "0"], "--reps"),
    ):
        with pytest.raises(SystemExit) as exc:
            ta.main(args)
        assert exc.value.code == 2 and what in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="this host has CUDA: the blocked path does not apply")
def test_dsa_tree_ab_without_a_device_is_blocked(capsys):
    from tool_contract import EXIT_BLOCKED
    from verify_tools import dsa_tree_ab as ta

    code = ta.main(["--trees", "base=/nowhere", "--shapes", "1:32768:4:16", "--configs", "auto,m16"])
    assert code == EXIT_BLOCKED and "no CUDA device" in capsys.readouterr().out


def test_sm_schedule_measures_the_gap_between_ctas_on_one_sm():
    import torch

    from verify_tools.dsa_bench import sm_schedule

    base = 10**18  # %globaltimer ns since an epoch: the differences are taken in int64
    # words: 0 entry, 3 tiles done, 4 end, 5 SM id (ns); SM 0 runs two CTAs back to back, SM 1 one
    rows = [
        [base, 0, 0, base + 80_000, base + 82_000, 0, 32, 0],
        [base + 83_000, 0, 0, base + 163_000, base + 166_000, 0, 32, 0],
        [base + 500, 0, 0, base + 80_500, base + 81_000, 1, 32, 0],
    ]
    s = sm_schedule(torch.tensor(rows, dtype=torch.int64))
    assert s["sm_gap_us_med"] == pytest.approx(1.0) and s["sm_gap_us_max"] == pytest.approx(1.0)
    assert s["epilogue_us_med"] == pytest.approx(2.0)  # 2.0, 3.0, 0.5
    assert s["ctas_per_sm_max"] == 2 and s["last_entry_us"] == pytest.approx(83.0)
    one = sm_schedule(torch.tensor(rows[:1] + rows[2:], dtype=torch.int64))
    assert one["sm_gap_us_med"] is None and one["ctas_per_sm_max"] == 1


def test_phase_row_reads_one_traced_call():
    import torch

    from verify_tools.dsa_bench import phase_row

    base = 10**18
    packed = (57 << 48) | (58 << 32) | (146 << 16) | 17  # per CTA, summed over its tiles (cycles / 16)
    # two split CTAs of 2 tiles on SMs 0 and 1, one that ran none (seq_lens 0: word 6 = 0), one combine CTA
    words = torch.tensor(
        [
            [base, base + 4_000, base + 5_000, base + 10_000, base + 12_000, 0, 2, packed],
            [base + 1_000, base + 5_000, base + 6_000, base + 12_000, base + 13_000, 1, 2, packed],
            [base + 2_000, 0, 0, 0, base + 2_500, 2, 0, 0],
            [base + 14_000, 0, base + 16_000, 0, 0, 0, 0, 0],
        ],
        dtype=torch.int64,
    )
    r = phase_row(words, n_split=3)
    assert r["ctas"] == 2 and r["tiles_med"] == 2.0
    assert r["loop_us_med"] == pytest.approx(5.0) and r["loop_us_per_tile_med"] == pytest.approx(2.5)
    assert r["prologue_us_med"] == pytest.approx(5.0) and r["split_end_us"] == pytest.approx(13.0)
    assert (r["setup_us_med"], r["first_wait_us_med"]) == (pytest.approx(4.0), pytest.approx(1.0))
    assert r["combine_end_us"] == pytest.approx(16.0) and r["ctas_per_sm_max"] == 1
    assert (r["wait_barrier_cycles_per_tile_med"], r["s_cycles_per_tile_med"]) == (17 * 16 / 2, 146 * 16 / 2)
    assert phase_row(words[:3], n_split=3).get("combine_end_us") is None  # S = 1: no combine CTAs


def test_bench_rows_name_how_the_splits_merge():
    from verify_tools.dsa_bench import combine_label

    assert combine_label(1, 0, True) == "none"  # one split: nothing to merge
    assert combine_label(8, 8, False) == "cluster8"
    assert [combine_label(2, 0, w) for w in (False, True)] == ["sliced", "wide"]


def test_w64_trace_word_decodes_into_four_phase_sums():
    """csrc W64_PHASE packs SM cycles / 16 per loop phase into 16-bit fields of timeline word 7."""
    from verify_tools.dsa_bench import W64_PHASES, phase_sums

    packed = (5 << 48) | (4 << 32) | (3 << 16) | 2
    assert phase_sums(packed) == dict(zip(W64_PHASES, (32, 48, 64, 80)))
    assert phase_sums(0xFFFF << 48)["store_pv_wait"] == 0xFFFF * 16  # a saturated field reads as its cap
