"""mla_verify_fwd rejects bad arguments with a ValueError that names the argument (checked on
CPU tensors: validation runs before any device work), and picks split counts from host-known
sizes only."""

from __future__ import annotations

import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from mla_verify import api, mla_verify_fwd, supports, tiles  # noqa: E402
from mla_verify.inputs import KERNEL_ARGS, CaseSpec, kernel_args, make_inputs  # noqa: E402
from tests.support.paths import KERNELS  # noqa: E402


@pytest.fixture
def args():
    inp = make_inputs(CaseSpec("v", (5, 3), (2, 3), 4, seed=1))
    return dict(zip(KERNEL_ARGS, kernel_args(inp)))


def call_validate(a, **kw):
    return api.validate(*[a[k] for k in KERNEL_ARGS], require_cuda=False, **kw)


def test_valid_cpu_arguments_pass_shape_checks(args):
    assert call_validate(args) == {"B": 2, "T": 5, "H": 4, "kv_fp8": False}


@pytest.mark.parametrize(
    "name,bad",
    [
        ("q_extend", lambda a: a["q_extend"].float()),
        ("q_extend", lambda a: a["q_extend"][..., :512]),
        ("q_extend", lambda a: torch.zeros(5, 129, 576, dtype=torch.bfloat16)),
        ("k_extend", lambda a: a["k_extend"][:4]),
        ("v_extend", lambda a: torch.zeros(5, 1, 576, dtype=torch.bfloat16)),
        ("o_extend", lambda a: torch.zeros(5, 3, 512, dtype=torch.bfloat16)),
        ("o_extend", lambda a: torch.zeros(5, 4, 512, 2, dtype=torch.bfloat16)[..., 0]),
        ("k_buffer", lambda a: a["k_buffer"].to(torch.float16)),
        ("v_buffer", lambda a: a["k_buffer"][..., :512].clone()),
        ("qo_indptr", lambda a: a["qo_indptr"].float()),
        ("qo_indptr", lambda a: a["qo_indptr"][:1]),
        ("kv_indptr", lambda a: a["kv_indptr"][:2]),
        ("kv_indices", lambda a: a["kv_indices"].int()),
        ("custom_mask", lambda a: a["custom_mask"].float()),
        ("is_causal", lambda a: 1),
        ("max_len_extend", lambda a: 0),
        ("max_len_extend", lambda a: 99),
    ],
)
def test_bad_argument_is_named(args, name, bad):
    args[name] = bad(args)
    with pytest.raises(ValueError, match=f"^{name}:"):
        call_validate(args)


def test_mask_without_mask_indptr_is_rejected(args):
    args["mask_indptr"] = None
    with pytest.raises(ValueError, match="^mask_indptr:"):
        call_validate(args)


@pytest.mark.parametrize(
    "kw,name",
    [
        ({"k_scale": 0.5}, "k_scale"),
        ({"v_scale": 2.0}, "v_scale"),
        ({"logit_cap": 30.0}, "logit_cap"),
        ({"sm_scale": -1.0}, "sm_scale"),
        ({"sm_scale": float("nan")}, "sm_scale"),
    ],
)
def test_unsupported_scalars_are_named(args, kw, name):
    with pytest.raises(ValueError, match=f"^{name}:"):
        call_validate(args, **kw)


def test_cpu_tensors_are_rejected_before_any_launch(args):
    with pytest.raises(ValueError, match="^q_extend: must be a CUDA tensor"):
        mla_verify_fwd(*[args[k] for k in KERNEL_ARGS])
    assert supports(*[args[k] for k in KERNEL_ARGS]) is False
    assert "CUDA" in api.why_unsupported(*[args[k] for k in KERNEL_ARGS])


def test_supports_never_raises_on_garbage():
    assert supports("not a tensor") is False


@pytest.mark.parametrize(
    "B,L,n,H",
    [
        (1, 4096, 8, 16),
        (1, 32768, 8, 16),
        (8, 32768, 8, 16),
        (32, 8192, 8, 16),
        (4, 65536, 4, 64),
        (1, 0, 4, 16),
        (128, 1024, 8, 128),
    ],
)
@pytest.mark.parametrize("cfg", [tiles.SM90WG, tiles.SM90, tiles.SM120])
def test_split_count_fills_about_one_wave_and_caps_partials(B, L, n, H, cfg):
    s = api.choose_num_splits(B, n, H, B * L, 132, cfg)
    m_tiles = -(-(n * H) // cfg.block_m)
    assert 1 <= s <= api.MAX_SPLITS
    assert B * m_tiles * s <= max(132 * cfg.ctas_per_sm_hint, B * m_tiles), (
        "at most one wave unless the batch alone exceeds it"
    )
    if L:
        assert s <= -(-L // cfg.block_n) + 1, "at most one split per KV tile, plus one for the drafts"
    partial_traffic = s * B * n * H * 513 * 4 * 2
    assert s == 1 or partial_traffic <= max(B * L * 1152, api.PARTIAL_CAP_BYTES)
    assert s == api.choose_num_splits(B, n, H, B * L, 132, cfg), "deterministic for a shape"


def test_b1_splits_give_the_draft_tile_its_own_split():
    # v4 (measured on the H200): 64 prefix splits and one more that runs only the draft tile
    for L in (4096, 8192, 16384, 32768, 131072):
        assert api.choose_num_splits(1, 8, 16, L, 132, tiles.SM90WG) == 65
    assert api.choose_num_splits(4, 4, 16, 4 * 131072, 132, tiles.SM90WG) == 33
    assert api.choose_num_splits(8, 8, 16, 8 * 32768, 132, tiles.SM90WG) == 8
    assert api.choose_num_splits(1, 8, 16, 100, 132, tiles.SM90WG) == 3, "two prefix tiles, one draft split"
    assert api.choose_num_splits(1, 8, 16, 0, 132, tiles.SM90WG) == 1


def test_long_single_request_gets_many_splits_and_big_batches_one():
    assert api.choose_num_splits(1, 8, 16, 32768, 132, tiles.SM90) >= 32
    assert api.choose_num_splits(128, 8, 16, 128 * 8192, 132, tiles.SM90) == 1


def test_workspace_size_counts_outputs_and_lse():
    assert api.workspace_numel(1, 10, 16) == 0
    assert api.workspace_numel(4, 10, 16) == 4 * 10 * 16 * 513


def test_outgrown_cached_workspace_stays_allocated_for_graphs_captured_on_it():
    import gc
    import weakref

    small = api.cached_workspace("cpu", 8, owner="test-outgrown")
    assert api.cached_workspace("cpu", 4, owner="test-outgrown") is small, "a smaller need reuses the cache"
    ref = weakref.ref(small)
    del small
    grown = api.cached_workspace("cpu", 16, owner="test-outgrown")
    gc.collect()
    assert grown.numel() == 16 and ref() is not None, "a graph may still write the outgrown buffer"
    assert api.cached_workspace("cpu", 16, owner="other-owner") is not grown, "each owner has its own cache"


def test_tile_configs_fit_their_arch_limits():
    for arch, cfgs in tiles.ARCH_CONFIGS.items():
        for c in cfgs:
            if tiles.DEFAULT_CONFIG[arch] is c or arch == "sm_120a":
                assert c.smem_bytes <= tiles.SMEM_LIMIT[arch]
    assert tiles.SM120.smem_bytes <= tiles.SMEM_LIMIT["sm_120a"], "the Blackwell config also runs on sm_90a"


def test_importing_the_kernel_package_does_not_import_torch():
    code = "import sys, mla_verify; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=str(KERNELS))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


class FakeExtension:
    """Stands in for the compiled module: records what mla_verify_fwd hands to the launcher."""

    def __init__(self):
        self.calls = []

    def fwd(self, *a):
        self.calls.append(a)


@pytest.fixture
def fake_launch(monkeypatch):
    """mla_verify_fwd on CPU tensors with the CUDA parts replaced: device info and the extension."""
    import mla_verify._build as build

    ext = FakeExtension()
    real_validate = api.validate
    monkeypatch.setattr(api, "validate", lambda *a, **k: real_validate(*a, require_cuda=False, **k))
    monkeypatch.setattr(api, "device_info", lambda dev: ("sm_90a", 132))
    monkeypatch.setattr(build, "load", lambda arch: ext)
    monkeypatch.setattr(api, "cached_workspace", lambda dev, n: torch.empty(n, dtype=torch.float32))
    return ext


def test_launcher_gets_mask_mode_splits_config_and_log2_scale(args, fake_launch):
    mla_verify_fwd(*[args[k] for k in KERNEL_ARGS], sm_scale=0.125, num_splits=3)
    (call,) = fake_launch.calls
    mask, mask_indptr, mask_mode, v_alias, splits, cfg, max_len, scale_log2, ws, k_scale, v_scale, sched = call[8:20]
    assert call[20] == 0, "an explicit num_splits runs as given (no device-side split rule)"
    assert sched == api.FP8_SCHEDULE_DEFAULT
    assert (k_scale, v_scale) == (1.0, 1.0), "bf16 cache: unit scales"
    assert mask_mode == 0 and mask is args["custom_mask"] and mask_indptr is args["mask_indptr"]
    assert v_alias == 0, "make_inputs gives v_extend its own storage, like SGLang's k_nope"
    assert (splits, cfg, max_len) == (3, tiles.DEFAULT_CONFIG["sm_90a"].index, 3)
    assert scale_log2 == pytest.approx(0.125 * 1.4426950408889634)
    assert ws.numel() >= api.workspace_numel(3, 5, 4)


def test_launcher_without_mask_uses_is_causal_and_one_split_needs_no_workspace(args, fake_launch):
    args["custom_mask"], args["mask_indptr"], args["is_causal"] = None, None, False
    mla_verify_fwd(*[args[k] for k in KERNEL_ARGS], num_splits=1, tile_config="sm120")
    mask, mask_indptr, mask_mode, _, splits, cfg, _, scale_log2, ws, _, _, _ = fake_launch.calls[0][8:20]
    assert (mask, mask_indptr, mask_mode, splits, cfg, ws) == (None, None, 2, 1, tiles.SM120.index, None)
    assert scale_log2 == pytest.approx(576**-0.5 * 1.4426950408889634)


@pytest.mark.parametrize(
    "kw,name",
    [
        ({"num_splits": 0}, "num_splits"),
        ({"num_splits": 129}, "num_splits"),
        ({"fp8_schedule": 3}, "fp8_schedule"),
        ({"tile_config": "sm100"}, "tile_config"),
        ({"num_splits": 4, "workspace": torch.empty(10)}, "workspace"),
        ({"num_splits": 4, "workspace": torch.empty(10**6, dtype=torch.float64)}, "workspace"),
    ],
)
def test_bad_launch_options_are_named(args, fake_launch, kw, name):
    with pytest.raises(ValueError, match=f"^{name}:"):
        mla_verify_fwd(*[args[k] for k in KERNEL_ARGS], **kw)
    assert fake_launch.calls == [], "nothing launched"


@pytest.fixture
def fp8_args():
    inp = make_inputs(CaseSpec("v8", (5, 3), (2, 3), 4, seed=1, kv_dtype="fp8", k_scale=0.5, v_scale=0.25))
    a = dict(zip(KERNEL_ARGS, kernel_args(inp)))
    a["k_scale"], a["v_scale"] = inp["k_scale"], inp["v_scale"]
    return a


def call_fp8(a, **kw):
    base = {k: a[k] for k in KERNEL_ARGS}
    scal = {"k_scale": a["k_scale"], "v_scale": a["v_scale"], **kw}
    return api.validate(*base.values(), scal.pop("k_scale"), scal.pop("v_scale"), **scal, require_cuda=False)


def test_fp8_cache_with_scales_is_accepted_as_float8_or_uint8_storage(fp8_args):
    assert call_fp8(fp8_args)["kv_fp8"] is True
    fp8_args["k_buffer"] = fp8_args["k_buffer"].view(torch.uint8)
    fp8_args["v_buffer"] = fp8_args["k_buffer"][..., :512]
    assert call_fp8(fp8_args)["kv_fp8"] is True


@pytest.mark.parametrize(
    "kw,name",
    [
        ({"k_scale": 0.0}, "k_scale"),
        ({"v_scale": float("inf")}, "v_scale"),
        ({"k_scale": torch.tensor(0.5)}, "k_scale"),  # a tensor scale would need a host sync
    ],
)
def test_fp8_cache_bad_scales_are_named(fp8_args, kw, name):
    with pytest.raises(ValueError, match=f"^{name}:"):
        call_fp8(fp8_args, **kw)


def test_fp8_cache_v_buffer_must_share_its_dtype(fp8_args):
    fp8_args["v_buffer"] = torch.zeros(fp8_args["k_buffer"].shape[0], 1, 512, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="^v_buffer:"):
        call_fp8(fp8_args)


def test_fp8_cache_rows_must_be_16_bytes_apart(fp8_args):
    """The fp8 loaders read 16-byte pieces of a row: a row stride that is a multiple of 8 elements but not of 16
    (bytes, one per fp8 value) would fault on the device, so it is named instead."""
    kb = fp8_args["k_buffer"]
    n = kb.shape[0]
    wide = torch.zeros(n * 592, dtype=kb.dtype)
    fp8_args["k_buffer"] = torch.as_strided(wide, (n, 1, 576), (584, 576, 1))
    fp8_args["v_buffer"] = fp8_args["k_buffer"][..., :512]
    with pytest.raises(ValueError, match=r"^k_buffer: stride\(0\)=584 must be a multiple of 16 elements"):
        call_fp8(fp8_args)
    fp8_args["k_buffer"] = torch.as_strided(wide, (n, 1, 576), (592, 576, 1))  # 592 = 37 x 16 bytes
    fp8_args["v_buffer"] = fp8_args["k_buffer"][..., :512]
    assert call_fp8(fp8_args)["kv_fp8"] is True


def test_fp8_drafts_must_stay_bf16(fp8_args):
    fp8_args["k_extend"] = fp8_args["k_extend"].to(torch.float8_e4m3fn)
    with pytest.raises(ValueError, match="^k_extend:"):
        call_fp8(fp8_args)


def test_launcher_gets_the_fp8_scales(fp8_args, fake_launch):
    mla_verify_fwd(*[fp8_args[k] for k in KERNEL_ARGS], k_scale=0.5, v_scale=0.25, num_splits=1)
    (call,) = fake_launch.calls
    assert call[4].dtype == torch.float8_e4m3fn and call[17:20] == (0.5, 0.25, api.FP8_SCHEDULE_DEFAULT)


def test_fp8_path_picks_the_fp8_arithmetic(fp8_args, fake_launch):
    """fp8_path picks the fp8 arithmetic, passed as the last launch argument (api.fp8_f16: 1 runs the config's F16
    kernel): "f16" 1, "bf16" 0, "auto" 1 only where a split's prefix chunk holds the config's fp8_f16_min_tokens.
    Past api.FP8_MAX_V_SCALE (the range of f16 P) "auto" passes 0 and an explicit "f16" is refused before any
    launch, as is "f16" on a config without an F16 kernel (the mma.sync ones) or an unknown path; sm90 gets 0."""
    argv = [fp8_args[k] for k in KERNEL_ARGS]
    kw = {"k_scale": 0.5, "num_splits": 1}
    for path in ("auto", "f16", "bf16"):
        mla_verify_fwd(*argv, **kw, v_scale=api.FP8_MAX_V_SCALE, tile_config="sm90wg", fp8_path=path)
    mla_verify_fwd(*argv, **kw, v_scale=api.FP8_MAX_V_SCALE * 2, tile_config="sm90wg")
    mla_verify_fwd(*argv, **kw, v_scale=1.0, tile_config="sm90")
    per_request = -(-fp8_args["kv_indices"].numel() // (len(fp8_args["kv_indptr"]) - 1))
    auto = int(per_request >= tiles.SM90WG.fp8_f16_min_tokens)  # one split: the chunk is the whole prefix
    assert [c[-1] for c in fake_launch.calls] == [auto, 1, 0, 0, 0]
    assert [c[13] for c in fake_launch.calls] == [tiles.SM90WG.index] * 4 + [tiles.SM90.index]
    with pytest.raises(ValueError, match="^v_scale:"):
        mla_verify_fwd(*argv, **kw, v_scale=api.FP8_MAX_V_SCALE * 2, tile_config="sm90wg", fp8_path="f16")
    for name in ("sm90", "sm120"):
        with pytest.raises(ValueError, match=f"^fp8_path:.*sm90wg.*not {name}$"):
            mla_verify_fwd(*argv, **kw, v_scale=1.0, tile_config=name, fp8_path="f16")
    with pytest.raises(ValueError, match="^fp8_path:"):
        mla_verify_fwd(*argv, **kw, v_scale=1.0, fp8_path="fp16")
    assert len(fake_launch.calls) == 5, "the refused calls launched nothing"


@pytest.mark.parametrize("cfg", [c for c in tiles.CONFIGS.values() if c.fp8_f16_min_tokens > 0], ids=lambda c: c.name)
def test_auto_fp8_path_takes_f16_from_the_tokens_of_a_split(cfg):
    """ "auto" runs f16 where a split's prefix chunk (the device's: ceil(prefix per request / splits) rounded up to
    whole block_n tiles) holds at least the config's fp8_f16_min_tokens; never on a config without an F16 kernel,
    for a bf16 cache or past FP8_MAX_V_SCALE. A CUDA-graph capture (whose replays may run any length) keeps the bf16
    decode for "auto" and an explicit "f16" the kernel of its chunk; with the opt-in graph gate, a capture whose
    chunk reaches fp8_ws_min_tokens gets the gated pair (3: the bf16 decode, 4 for "f16": the F16 kernel, each with
    the warp-specialized kernel behind it), a shorter one what it gets without the gate."""
    n, bn = cfg.fp8_f16_min_tokens, cfg.block_n

    def f16(total, B=1, S=1, c=cfg, v_scale=1.0, kv_fp8=True, capturing=False, path="auto", gate=False):
        return api.fp8_f16(path, kv_fp8, c, v_scale, B, total, S, capturing, gate)

    below = n - bn  # a chunk one tile short of the threshold
    assert f16(below) == 0 and f16(below + 1) == 1 and f16(n) == 1
    assert f16(4 * below, S=4) == 0 and f16(4 * below + 1, S=4) == 1
    assert f16(8 * below, B=8) == 0 and f16(8 * n, B=8) == 1
    assert f16(64 * n, c=tiles.SM90) == 0 and f16(64 * n, c=tiles.SM120) == 0 and f16(64 * n, kv_fp8=False) == 0
    assert f16(64 * n, v_scale=api.FP8_MAX_V_SCALE * 2) == 0
    ws = cfg.fp8_ws_min_tokens
    assert f16(ws, capturing=True) == 0 and f16(ws, capturing=True, path="f16") == 2
    assert f16(ws - bn, capturing=True, path="f16") == 1
    assert f16(ws, capturing=True, gate=True) == 3 and f16(ws, capturing=True, gate=True, path="f16") == 4
    assert f16(ws - bn, capturing=True, gate=True) == 0 and f16(ws - bn, capturing=True, gate=True, path="f16") == 1
    assert (
        f16(ws, capturing=True, gate=True, path="bf16") == 0 and f16(ws, capturing=True, gate=True, kv_fp8=False) == 0
    )
    assert f16(ws, capturing=True, gate=True, v_scale=api.FP8_MAX_V_SCALE * 2) == 0
    assert f16(ws, gate=True) == 2, "the gate acts in captures only"


@pytest.mark.parametrize("cfg", [c for c in tiles.CONFIGS.values() if c.fp8_ws_min_tokens > 0], ids=lambda c: c.name)
def test_f16_arithmetic_takes_the_warp_specialized_kernel_from_its_tokens_of_a_split(cfg):
    """The f16 arithmetic runs the warp-specialized fp8 kernel (launch flag 2) where a split's prefix chunk holds at
    least the config's fp8_ws_min_tokens, the F16 kernel (1) below: both for "auto" and for an explicit "f16"; the two
    kernels share the arithmetic (outputs within the oracle's bound of each other: the GPU test), so the choice is one
    of time."""
    ws, bn = cfg.fp8_ws_min_tokens, cfg.block_n
    assert ws > cfg.fp8_f16_min_tokens

    def flag(total, B=1, S=1, path="auto"):
        return api.fp8_f16(path, True, cfg, 1.0, B, total, S)

    assert flag(ws) == 2 and flag(ws - bn) == 1 and flag(ws - bn, path="f16") == 1 and flag(ws, path="f16") == 2
    assert flag(4 * ws, S=4) == 2 and flag(4 * (ws - bn), S=4) == 1 and flag(8 * ws, B=8) == 2
    assert flag(64, path="f16") == 1 and flag(64) == 0


def test_device_gate_threshold_is_the_tile_tables():
    """The gated graph launches (flags 3 and 4) compare a replay's chunk on the device with MLAV_WS_FP8_MIN_TOKENS
    (csrc/mla_verify.cu); it is the one config with a warp-specialized fp8 kernel's fp8_ws_min_tokens, so a replay
    takes the kernel an eager call of its length takes (the GPU test checks the built module's value too)."""
    import re

    src = (KERNELS / "mla_verify" / "csrc" / "mla_verify.cu").read_text(encoding="utf-8")
    threshold = int(re.search(r"#define MLAV_WS_FP8_MIN_TOKENS (\d+)", src).group(1))
    assert [c.fp8_ws_min_tokens for c in tiles.CONFIGS.values() if c.fp8_ws_min_tokens > 0] == [threshold]


def test_fp8_max_v_scale_keeps_the_f16_p_below_its_range():
    """The bound holds for the kernel's lazy softmax margin: P <= 2^LAZY_TAU, times v_scale, at most 2^15, half
    of f16's largest finite value (65504) rounded to a power of two. LAZY_TAU is read from the CUDA source."""
    import re

    src = (KERNELS / "mla_verify" / "csrc" / "mla_verify_wgmma.cuh").read_text(encoding="utf-8")
    tau = float(re.search(r"constexpr float LAZY_TAU = ([0-9.]+)f;", src).group(1))
    assert 2.0**tau * api.FP8_MAX_V_SCALE <= 2.0**15 < 65504


def test_parity_suite_runs_the_warp_specialized_fp8_kernel_on_a_132_sm_hopper():
    """Some fp8 parity case takes launch flag 2 (the warp-specialized fp8 kernel) under the f16 arithmetic on an
    H100 / H200 (132 SMs, the auto split count), so phase 1 covers the kernel eager long-split calls run; and some
    takes flag 1 (the F16 kernel)."""
    from verify_tools import parity

    cfg = tiles.SM90WG
    flags = set()
    for spec in parity.CASES:
        if spec.kv_dtype != "fp8" or spec.v_scale > api.FP8_MAX_V_SCALE:
            continue
        B, total = len(spec.prefix_lens), sum(spec.prefix_lens)
        rule = api.split_rule(B, max(spec.draft_lens), spec.heads, 132, cfg, tiles.ctas_per_sm(cfg, "sm_90a"))
        flags.add(api.fp8_f16("f16", True, cfg, spec.v_scale, B, total, api.splits_for_total(rule, B, total)))
    assert flags == {1, 2}


def test_the_gated_graph_case_replays_on_both_sides_of_the_warp_specialized_threshold():
    """The parity suite's gated graph case (captured with fp8_graph_gate) takes flags 3 ("auto") and 4 ("f16") on an
    H100 / H200 (132 SMs), and its replays run the warp-specialized kernel (a chunk of at least fp8_ws_min_tokens,
    the threshold itself included) and the pair's first kernel (shorter chunks), so phase 1 checks both sides of the
    device's gate bitwise against eager calls, under "auto" as well as the explicit paths."""
    from verify_tools import parity

    cfg = tiles.SM90WG
    for name in parity.GATED_GRAPH_CASES:
        spec, _, replays = parity.GRAPH_CASES[name]
        assert parity.graph_fp8_paths(spec, cfg.name) == ("auto", "bf16", "f16")
        B, n = len(spec.prefix_lens), max(spec.draft_lens)
        rule = api.split_rule(B, n, spec.heads, 132, cfg, tiles.ctas_per_sm(cfg, "sm_90a"))
        buf = parity.GRAPH_BUFFER_FACTOR * sum(spec.prefix_lens)
        s_grid = api.splits_for_total(rule, B, buf)
        for path, flag in (("auto", 3), ("f16", 4)):
            assert api.fp8_f16(path, True, cfg, spec.v_scale, B, buf, s_grid, True, True) == flag
        chunks = set()
        for lens in (r for r in replays if r != "hostile"):
            total = sum(lens)
            s = api.splits_for_total(rule, B, total, s_grid)
            chunks.add(api.split_chunk(api.request_length(B, total), s, cfg.block_n))
        assert cfg.fp8_ws_min_tokens in chunks
        assert min(chunks) < cfg.fp8_ws_min_tokens < max(chunks)
