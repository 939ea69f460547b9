"""GPU tests (skipped with the reason on hosts without CUDA): the parity quick set passes, both
tile configs and both split paths match the oracle, CUDA-graph replay equals the eager call,
and out-of-range slot ids (past the pool, -1) never fault: they read as zero K/V rows (api.py);
a running max that rises along the prefix (the wgmma config's lazy softmax reference then takes
its exact step mid-stream) still matches the oracle; the fp8 cache matches the oracle on every
config, split path and loader schedule; a max-sized index buffer (CUDA-graph style) gives the
exact-length result, bitwise (issue 11: the split count comes from kv_indptr on the device); the
parity suite's graph cases (capture once, rewrite in place, replay) are bitwise the eager call
with the derived count (run under pytest on the H200 in session 9: 17 passed, by
tests/device/kernel_run.sh gs)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from mla_verify import api, mla_verify_fwd, tiles  # noqa: E402
from mla_verify.inputs import CaseSpec, kernel_args, make_inputs, oracle_kwargs  # noqa: E402
from mla_verify.reference import mla_verify_ref  # noqa: E402
from verify_tools import parity  # noqa: E402

pytestmark = pytest.mark.gpu

SPEC = CaseSpec("gpu_varlen_tree", (3000, 0, 517), (8, 4, 16), 16, seed=21)


def rel_err(out, ref):
    return float((out.double() - ref).norm() / ref.norm())


def test_parity_quick_set_passes(cuda_device, capsys):
    code = parity.main(["--quick", "--json"])
    assert code == 0, capsys.readouterr().out[-2000:]


@pytest.mark.parametrize("splits", [1, 7])
def test_each_tile_config_and_split_path_matches_the_oracle(cuda_device, splits):
    inp = make_inputs(SPEC, cuda_device)
    ref = mla_verify_ref(**oracle_kwargs(inp))
    for cfg in tiles.ARCH_CONFIGS[api.device_arch(cuda_device)]:
        inp["o_extend"].fill_(float("nan"))
        mla_verify_fwd(*kernel_args(inp), sm_scale=inp["sm_scale"], num_splits=splits, tile_config=cfg.name)
        assert rel_err(inp["o_extend"], ref) <= parity.REL_FRO_BOUND, cfg.name


@pytest.mark.parametrize("splits", [1, 3])
def test_a_max_rising_along_the_prefix_matches_the_oracle(cuda_device, splits):
    """The wgmma config's lazy softmax reference: its exact step must also run mid-stream. Prefix
    K/V rows scaled by 2^(4 t / L) push the running row max up by far more than the lazy margin
    (2^8) across a split's tiles."""
    inp = make_inputs(CaseSpec("rising_max", (8192,), (4,), 16, tree="chain", poison=False, seed=23), cuda_device)
    idx = inp["kv_indices"]
    ramp = torch.exp2(4.0 * torch.arange(idx.numel(), device=cuda_device, dtype=torch.float32) / idx.numel())
    kb = inp["k_buffer"]
    kb[idx] = (kb[idx].float() * ramp[:, None, None]).to(kb.dtype)
    ref = mla_verify_ref(**oracle_kwargs(inp))
    for cfg in tiles.ARCH_CONFIGS[api.device_arch(cuda_device)]:
        inp["o_extend"].fill_(float("nan"))
        mla_verify_fwd(*kernel_args(inp), sm_scale=inp["sm_scale"], num_splits=splits, tile_config=cfg.name)
        assert rel_err(inp["o_extend"], ref) <= parity.REL_FRO_BOUND, cfg.name


def test_cuda_graph_replay_equals_the_eager_call(cuda_device):
    inp = make_inputs(SPEC, cuda_device)
    args = kernel_args(inp)
    ws = torch.empty(api.workspace_numel(api.MAX_SPLITS, 28, 16), dtype=torch.float32, device=cuda_device)
    mla_verify_fwd(*args, sm_scale=inp["sm_scale"], workspace=ws)
    eager = inp["o_extend"].clone()
    inp["o_extend"].zero_()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        mla_verify_fwd(*args, sm_scale=inp["sm_scale"], workspace=ws)
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(inp["o_extend"], eager)


def test_replay_on_the_implicit_workspace_survives_a_larger_eager_call(cuda_device):
    """A graph captured without a workspace runs on the cached one; a later call that grows the cache
    must not free it under the graph (session 30: cold_code.py's replays faulted on freed memory)."""
    inp = make_inputs(SPEC, cuda_device)
    args = kernel_args(inp)
    mla_verify_fwd(*args, sm_scale=inp["sm_scale"], num_splits=2)
    eager = inp["o_extend"].clone()
    inp["o_extend"].zero_()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        mla_verify_fwd(*args, sm_scale=inp["sm_scale"], num_splits=2)
    big = make_inputs(CaseSpec("grow", (3000,), (8,), 64, seed=5), cuda_device)
    mla_verify_fwd(*kernel_args(big), sm_scale=big["sm_scale"], num_splits=api.MAX_SPLITS)
    # had the small workspace been freed, the allocator would hand its block to a same-sized tensor
    others = [torch.full((api.workspace_numel(2, 28, 16),), 7.0, device=cuda_device) for _ in range(4)]
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(inp["o_extend"], eager)
    assert all(bool((t == 7.0).all()) for t in others), "the replay wrote memory another tensor owns"


def zero_row_oracle(inp: dict, bad) -> torch.Tensor:
    """The oracle under api.py's contract for bad slot ids: each prefix position flagged in ``bad``
    reads an all-zero K/V row (its key still counts in the softmax, with q.k = 0) instead of faulting."""
    kw = oracle_kwargs(inp)
    kb = kw["k_buffer"]
    kz = torch.cat([kb, torch.zeros_like(kb[:1])])  # row kb.shape[0]: the zero row
    idx = kw["kv_indices"].clone()
    idx[bad] = kb.shape[0]
    return mla_verify_ref(**dict(kw, k_buffer=kz, v_buffer=kz[..., :512], kv_indices=idx))


@pytest.mark.parametrize("bad_slot", ["pool_size", 10**12, -1], ids=["first-past-the-pool", "far-past", "minus-one"])
def test_out_of_range_slots_read_as_zero_rows_not_a_fault(cuda_device, bad_slot):
    inp = make_inputs(CaseSpec("bad_slots", (300, 40), (4, 3), 16, poison=False, seed=22), cuda_device)
    pool = inp["k_buffer"].shape[0]
    bad = torch.zeros_like(inp["kv_indices"], dtype=torch.bool)
    bad[:300:7] = True  # request 0 only: request 1's rows must come out as if nothing happened
    inp["kv_indices"][bad] = pool if bad_slot == "pool_size" else bad_slot
    want = zero_row_oracle(inp, bad)
    inp["o_extend"].fill_(float("nan"))
    mla_verify_fwd(*kernel_args(inp), sm_scale=inp["sm_scale"])
    torch.cuda.synchronize()
    got = inp["o_extend"]
    assert rel_err(got[:4], want[:4]) <= parity.REL_FRO_BOUND, "request 0: bad slots read as zero rows"
    assert rel_err(got[4:], want[4:]) <= parity.REL_FRO_BOUND, "request 1 is untouched"


def test_binding_smem_matches_the_python_tile_table(cuda_device):
    from mla_verify._build import load

    arch = api.device_arch(cuda_device)
    mod = load(arch)
    for cfg in tiles.ARCH_CONFIGS[arch]:
        assert mod.config_compiled(cfg.index)
        assert mod.config_smem_bytes(cfg.index) == cfg.smem_bytes
        assert mod.config_block_m(cfg.index) == cfg.block_m
        assert mod.config_has_fp8_f16(cfg.index) == (cfg.fp8_f16_min_tokens > 0)
        assert mod.config_fp8_ws_min_tokens(cfg.index) == cfg.fp8_ws_min_tokens


SPEC8 = CaseSpec(
    "gpu_varlen_tree_fp8", (3000, 0, 517), (8, 4, 16), 16, seed=23, kv_dtype="fp8", k_scale=0.5, v_scale=2.0
)


@pytest.mark.parametrize("splits", [1, 7])
def test_fp8_cache_every_config_split_path_and_loader_schedule_matches_the_oracle(cuda_device, splits):
    inp = make_inputs(SPEC8, cuda_device)
    ref = mla_verify_ref(**oracle_kwargs(inp))  # on the dequantized cache values
    kw = {"k_scale": inp["k_scale"], "v_scale": inp["v_scale"], "sm_scale": inp["sm_scale"]}
    for cfg in tiles.ARCH_CONFIGS[api.device_arch(cuda_device)]:
        for sched in api.FP8_SCHEDULES if cfg.engine == "wgmma" else (api.FP8_SCHEDULE_DEFAULT,):
            inp["o_extend"].fill_(float("nan"))
            mla_verify_fwd(*kernel_args(inp), **kw, num_splits=splits, tile_config=cfg.name, fp8_schedule=sched)
            assert rel_err(inp["o_extend"], ref) <= parity.REL_FRO_BOUND, (cfg.name, sched)


@pytest.mark.parametrize("cfg_name", [c.name for c in tiles.CONFIGS.values() if c.fp8_f16_min_tokens > 0])
def test_both_fp8_arithmetics_match_the_oracle(cuda_device, cfg_name):
    """A config's two fp8 kernels (fp8_path "f16": f16 MMAs on a rewritten Q; "bf16": rows decoded to bf16) each
    within the oracle's bound, deterministic, and "auto" bitwise one of them: f16 here, where each of the two splits
    holds far more than the config's fp8_f16_min_tokens. Past api.FP8_MAX_V_SCALE "auto" is bitwise the bf16 path
    and an explicit "f16" is refused."""
    cfg = tiles.CONFIGS[cfg_name]
    if cfg not in tiles.ARCH_CONFIGS[api.device_arch(cuda_device)]:
        pytest.skip(f"{cfg_name} is not built for {api.device_arch(cuda_device)}")
    for v_scale in (0.5, api.FP8_MAX_V_SCALE * 2):
        spec = CaseSpec("fp8_paths", (3000, 517), (8, 4), 16, seed=27, kv_dtype="fp8", k_scale=0.5, v_scale=v_scale)
        inp = make_inputs(spec, cuda_device)
        ref = mla_verify_ref(**oracle_kwargs(inp))
        kw = {"k_scale": inp["k_scale"], "v_scale": inp["v_scale"], "sm_scale": inp["sm_scale"], "num_splits": 2}
        outs = {}
        for path in ("auto", "bf16", "f16") if v_scale <= api.FP8_MAX_V_SCALE else ("auto", "bf16"):
            for _ in range(2):
                inp["o_extend"].fill_(float("nan"))
                mla_verify_fwd(*kernel_args(inp), **kw, tile_config=cfg_name, fp8_path=path)
                assert path not in outs or torch.equal(outs[path], inp["o_extend"]), path
                outs[path] = inp["o_extend"].clone()
            assert rel_err(outs[path], ref) <= parity.REL_FRO_BOUND, (v_scale, path)
        if v_scale <= api.FP8_MAX_V_SCALE:
            assert torch.equal(outs["auto"], outs["f16"]) and not torch.equal(outs["f16"], outs["bf16"])
        else:
            assert torch.equal(outs["auto"], outs["bf16"])
            with pytest.raises(ValueError, match="v_scale"):
                mla_verify_fwd(*kernel_args(inp), **kw, tile_config=cfg_name, fp8_path="f16")


@pytest.mark.parametrize("cfg_name", [c.name for c in tiles.CONFIGS.values() if c.fp8_ws_min_tokens > 0])
def test_warp_specialized_fp8_kernel_matches_the_f16_kernel(cuda_device, cfg_name, monkeypatch):
    """The f16 arithmetic's two kernels (launch flag 2: warp-specialized with ASYM consumers, api.fp8_f16 picks it for
    long chunks; 1: the F16 kernel) are each deterministic and within the oracle's bound, and within that bound of
    each other, on requests with a one-tile prefix, a long one and none (drafts in each); the flag is forced through
    api.fp8_f16. Not bitwise: ASYM's softmax sees a tile's 64 columns at once (session 43's token-split consumers
    were bitwise the F16 kernel's)."""
    cfg = tiles.CONFIGS[cfg_name]
    if cfg not in tiles.ARCH_CONFIGS[api.device_arch(cuda_device)]:
        pytest.skip(f"{cfg_name} is not built for {api.device_arch(cuda_device)}")
    spec = CaseSpec("fp8_ws", (40, 9000, 0), (8, 4, 3), 16, seed=29, kv_dtype="fp8", k_scale=0.5, v_scale=2.0)
    inp = make_inputs(spec, cuda_device)
    ref = mla_verify_ref(**oracle_kwargs(inp))
    kw = {"k_scale": inp["k_scale"], "v_scale": inp["v_scale"], "sm_scale": inp["sm_scale"], "num_splits": 3}
    outs = {}
    for forced in (1, 2, 2):
        monkeypatch.setattr(api, "fp8_f16", lambda *a, f=forced, **k: f)
        inp["o_extend"].fill_(float("nan"))
        mla_verify_fwd(*kernel_args(inp), **kw, tile_config=cfg_name, fp8_path="f16")
        assert forced not in outs or torch.equal(outs[forced], inp["o_extend"]), forced
        outs[forced] = inp["o_extend"].clone()
    assert all(rel_err(o, ref) <= parity.REL_FRO_BOUND for o in outs.values())
    assert rel_err(outs[2], outs[1].double()) <= parity.REL_FRO_BOUND


def test_max_sized_index_buffer_gives_the_exact_length_result(cuda_device):
    """SGLang's CUDA-graph path: kv_indices is a larger buffer than the prefixes use (the split
    count comes from its size); the output must match the exact-size call within the bound."""
    inp = make_inputs(SPEC, cuda_device)
    ref = mla_verify_ref(**oracle_kwargs(inp))
    args = list(kernel_args(inp))
    big = torch.zeros(args[8].numel() * 40, dtype=torch.int64, device=cuda_device)
    big[: args[8].numel()] = args[8]
    args[8] = big
    inp["o_extend"].fill_(float("nan"))
    mla_verify_fwd(*args, sm_scale=inp["sm_scale"])
    assert rel_err(inp["o_extend"], ref) <= parity.REL_FRO_BOUND


def test_max_sized_index_buffer_runs_the_exact_length_split_count(cuda_device):
    """Issue 11: with a max-sized kv_indices buffer the kernel derives the split count from
    kv_indptr on the device, so the output is bitwise the exact-size call's (same count)."""
    inp = make_inputs(SPEC, cuda_device)
    args = list(kernel_args(inp))
    arch, sms = api.device_info(cuda_device)
    cfg = tiles.DEFAULT_CONFIG[arch]
    B, total = SPEC.batch, args[8].numel()
    rule = api.split_rule(B, inp["max_len_extend"], SPEC.heads, sms, cfg, tiles.ctas_per_sm(cfg, arch))
    grid = api.splits_for_total(rule, B, total * 40)
    s_run = api.splits_for_total(rule, B, total, grid)
    assert s_run == api.splits_for_total(rule, B, total), "the capture's count does not cap this case"
    mla_verify_fwd(*args, sm_scale=inp["sm_scale"], num_splits=s_run)
    exact = inp["o_extend"].clone()
    big = torch.zeros(total * 40, dtype=torch.int64, device=cuda_device)
    big[:total] = args[8]
    args[8] = big
    inp["o_extend"].fill_(float("nan"))
    mla_verify_fwd(*args, sm_scale=inp["sm_scale"])
    assert torch.equal(inp["o_extend"], exact)


@pytest.mark.parametrize("name", sorted(parity.GRAPH_CASES))
def test_graph_replay_after_in_place_rewrites_is_bitwise_the_eager_call(cuda_device, name):
    """One capture on max-size buffers, replays after rewrites (longer, shorter, 0, hostile):
    each equals an eager call with the split count the device derived (and, fp8, the arithmetic the capture
    resolved), and meets the oracle."""
    w = parity.lm_head(cuda_device)
    cfg = tiles.DEFAULT_CONFIG[api.device_arch(cuda_device)].name
    rows = parity.run_graph_case(name, cfg, w, cuda_device)
    assert rows and all(r["equal_eager_same_splits"] for r in rows), rows
    assert all(r["ok"] for r in rows), [r for r in rows if not r["ok"]]
    assert any(r["splits_effective"] != r["splits_grid"] for r in rows), "no replay changed the split count"
