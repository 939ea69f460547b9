"""Python entry point of the bundled sparse (DSA) MLA verify kernel: SGLang's dsa-backend seam.

dsa_verify_fwd(q_all, kv_cache, page_table_1, seq_lens, sm_scale) with (T query rows, H heads):
  q_all        [T, H, 576] bf16 (absorbed nope 0..511, rope 512..575), last dim contiguous
  kv_cache     bf16 [slots, 1, 576] (or [slots, 576]), or SGLang's fp8 rows: uint8 /
               float8_e4m3fn [slots, 1, 656] (512 e4m3 + 4 fp32 scales + 64 bf16 rope; layout.py)
  page_table_1 [T, topk] int32 physical slot ids (page_size 1), -1 tail padding; stride(1) == 1
  seq_lens     [T] int32: entries [0, seq_lens[t]) of row t are used (clamped to [0, topk]);
               entries that are < 0 or >= slots are skipped on the device, never read
  sm_scale     float > 0 (GLM-5: 0.0625)
Returns out [T, H, 512] bf16 (a new tensor, or `out`), and fills `lse` [T, H] fp32 (natural log,
-inf for an empty row) when given. Nothing on the host reads device values: the split count
depends on (T, H, topk, device) only, so a call is CUDA-graph capturable given a persistent
`workspace` (workspace_numel_for gives its size). Deterministic: fixed split order.
"""

from __future__ import annotations

import math

from mla_verify.api import cached_workspace, device_info, named_config

from . import tiles
from .layout import BF16_ROW, FP8_ROW_BYTES

LOG2E = 1.4426950408889634
D_QK, D_V = 576, 512
MAX_SPLITS = 128
MAX_TOPK = 1 << 20


def _is_tensor(x) -> bool:
    import torch

    return isinstance(x, torch.Tensor)


def _fail(name: str, msg: str):
    raise ValueError(f"{name}: {msg}")


def _dt(d) -> str:
    return str(d).replace("torch.", "")


def _check_tensor(t, name: str):
    if not _is_tensor(t):
        _fail(name, f"expected a torch.Tensor, got {type(t).__name__}")


def _check_rows16(t, name: str):
    """Last dim contiguous, every other stride a multiple of 16 bytes, 16-byte aligned base."""
    st = t.stride()
    if st[-1] != 1:
        _fail(name, "last dim must be contiguous (stride 1)")
    es = t.element_size()
    for d in range(t.dim() - 1):
        if (st[d] * es) % 16 and t.shape[d] != 1:
            _fail(name, f"stride({d})={st[d]} must be a multiple of 16 bytes")
    if t.numel() and t.data_ptr() % 16:
        _fail(name, "data pointer must be 16-byte aligned")


def validate(q_all, kv_cache, page_table_1, seq_lens, sm_scale, out=None, lse=None, *, require_cuda=True) -> dict:
    """Check every argument (ValueError naming it); returns {T, H, topk, fp8}."""
    import torch

    _check_tensor(q_all, "q_all")
    if q_all.dtype != torch.bfloat16:
        _fail("q_all", f"dtype must be bfloat16, got {_dt(q_all.dtype)}")
    if q_all.dim() != 3 or q_all.shape[2] != D_QK:
        _fail("q_all", f"shape must be [T, H, {D_QK}], got {tuple(q_all.shape)}")
    T, H = int(q_all.shape[0]), int(q_all.shape[1])
    if not 1 <= H <= 128:
        _fail("q_all", f"head count must be in [1, 128], got {H}")
    _check_rows16(q_all, "q_all")

    _check_tensor(kv_cache, "kv_cache")
    if kv_cache.dim() not in (2, 3) or (kv_cache.dim() == 3 and kv_cache.shape[1] != 1):
        _fail("kv_cache", f"shape must be [slots, 1, row] or [slots, row], got {tuple(kv_cache.shape)}")
    row = kv_cache.shape[-1]
    if kv_cache.dtype == torch.bfloat16:
        if row != BF16_ROW:
            _fail("kv_cache", f"a bf16 cache row must hold {BF16_ROW} values, got {row}")
        fp8 = False
    elif kv_cache.dtype in (torch.uint8, torch.float8_e4m3fn):
        if row != FP8_ROW_BYTES:
            _fail(
                "kv_cache",
                f"an fp8 cache row must be {FP8_ROW_BYTES} bytes (512 e4m3 + 16 scale + 128 rope), got {row}",
            )
        fp8 = True
    else:
        _fail("kv_cache", f"dtype must be bfloat16, uint8 or float8_e4m3fn, got {_dt(kv_cache.dtype)}")
    if kv_cache.shape[0] < 1:
        _fail("kv_cache", "needs at least one slot")
    if kv_cache.shape[0] >= 2**31:
        _fail("kv_cache", f"{kv_cache.shape[0]} slots exceed int32 slot ids")
    _check_rows16(kv_cache, "kv_cache")

    _check_tensor(page_table_1, "page_table_1")
    if page_table_1.dtype != torch.int32:
        _fail("page_table_1", f"dtype must be int32, got {_dt(page_table_1.dtype)}")
    if page_table_1.dim() != 2 or page_table_1.shape[0] != T:
        _fail("page_table_1", f"shape must be [T={T}, topk], got {tuple(page_table_1.shape)}")
    topk = int(page_table_1.shape[1])
    if not 1 <= topk <= MAX_TOPK:
        _fail("page_table_1", f"topk (dim 1) must be in [1, {MAX_TOPK}], got {topk}")
    if page_table_1.stride(1) != 1 and topk > 1:
        _fail("page_table_1", "dim 1 must be contiguous (stride 1)")

    _check_tensor(seq_lens, "seq_lens")
    if seq_lens.dtype != torch.int32:
        _fail("seq_lens", f"dtype must be int32, got {_dt(seq_lens.dtype)}")
    if seq_lens.dim() != 1 or seq_lens.shape[0] != T:
        _fail("seq_lens", f"shape must be [T={T}], got {tuple(seq_lens.shape)}")
    if not seq_lens.is_contiguous():
        _fail("seq_lens", "must be contiguous")

    if isinstance(sm_scale, bool) or not isinstance(sm_scale, (int, float)):
        _fail("sm_scale", f"must be a float, got {type(sm_scale).__name__}")
    if not (math.isfinite(sm_scale) and sm_scale > 0):
        _fail("sm_scale", f"must be finite and > 0, got {sm_scale!r}")

    if out is not None:
        _check_tensor(out, "out")
        if out.dtype != torch.bfloat16 or tuple(out.shape) != (T, H, D_V):
            _fail("out", f"must be bfloat16 [{T}, {H}, {D_V}], got {_dt(out.dtype)} {tuple(out.shape)}")
        _check_rows16(out, "out")
    if lse is not None:
        _check_tensor(lse, "lse")
        if lse.dtype != torch.float32 or tuple(lse.shape) != (T, H) or not lse.is_contiguous():
            _fail("lse", f"must be a contiguous float32 [{T}, {H}], got {_dt(lse.dtype)} {tuple(lse.shape)}")
    dev = q_all.device
    named = [("kv_cache", kv_cache), ("page_table_1", page_table_1), ("seq_lens", seq_lens)]
    named += [(n, t) for n, t in (("out", out), ("lse", lse)) if t is not None]
    if require_cuda and not q_all.is_cuda:
        _fail("q_all", "must be a CUDA tensor")
    for name, t in named:
        if t.device != dev:
            _fail(name, f"on {t.device}, but q_all is on {dev}")
    return {"T": T, "H": H, "topk": topk, "fp8": fp8}


def split_plan(T: int, H: int, topk: int, num_sms: int, ctas_per_sm: int, cfg: tiles.TileConfig) -> tuple[int, int]:
    """(S splits, chunk positions per split) from host-known sizes only (CUDA-graph safe).

    Aims at one wave (num_sms * ctas_per_sm CTAs), keeps >= STAGES tiles per split (a CTA's whole
    KV slice is then in flight at once), caps fp32 partial traffic at max(KV bytes, 32 MiB)."""
    m_tiles = math.ceil(H / cfg.block_m)
    base = T * m_tiles
    slots = max(1, num_sms * max(1, ctas_per_sm))
    s = 1 if base >= 0.8 * slots else max(1, slots // base)
    # m configs keep >= STAGES tiles per split (pipelining in one CTA); n8 warps each own a ring, so
    # one tile per split already has STAGES tiles per warp in flight
    s = min(s, max(1, topk // (cfg.block_n * (1 if cfg.kind == "n8" else cfg.stages))))
    cap = max(T * topk * tiles.BF_ROW, 32 * 2**20)
    s = min(s, max(1, cap // (T * H * 513 * 4 * 2)), MAX_SPLITS)
    chunk = math.ceil(math.ceil(topk / s) / cfg.block_n) * cfg.block_n
    return math.ceil(topk / chunk), chunk


def workspace_numel(num_splits: int, T: int, H: int) -> int:
    """fp32 elements of the split workspace: S*T*H*512 partial outputs + S*T*H lse values."""
    return 0 if num_splits <= 1 else num_splits * T * H * 513


_OCC: dict = {}


_SM120_OCCUPANCY = False  # emulate_sm120_occupancy() was called in this process


def emulate_sm120_occupancy(device) -> None:
    """Diagnostic, sm_90a devices only, for the rest of the process: every config runs from the
    experimental build (_build.load_experimental) with its dynamic shared memory padded so that an
    SM holds exactly as many CTAs as a 100 KB sm_120 SM would (tiles.sm120_ctas_per_sm), and
    tile_config="auto", the config check and the split plan follow sm_120a's rules. What a Blackwell
    host would run, measured on Hopper silicon: registers per SM match, while the SM count (the
    split plan uses this device's), clocks, bandwidth and L2 stay this device's."""
    global _SM120_OCCUPANCY
    from ._build import load_experimental

    arch, _ = device_info(device)
    if arch != "sm_90a":
        _fail("device", f"the sm_120 occupancy emulation runs on sm_90a devices only, not {arch}")
    import torch

    with torch.cuda.device(device):
        if not load_experimental(arch).set_sm120_occupancy(tiles.SM120_SMEM_PER_SM, tiles.SM120_RESERVED_PER_BLOCK):
            _fail("device", "this build has no sm_120 occupancy emulation (DSAV_EXPERIMENTAL)")
    _SM120_OCCUPANCY = True


def _ctas_per_sm(mod, device, cfg: tiles.TileConfig, fp8: bool) -> int:
    key = (device.index, cfg.name, fp8, _SM120_OCCUPANCY)
    if key not in _OCC:
        import torch

        with torch.cuda.device(device):
            _OCC[key] = max(1, int(mod.config_ctas_per_sm(cfg.index, fp8)))
    return _OCC[key]


_CLUSTERS: dict = {}
COMBINES = ("auto", "kernel", "sliced", "wide", "cluster")
# S > 1 splits merge in the wide combine kernel (one warp per (row, head) over all 512 dims) from this
# many (row, head) pairs on, else in the sliced one (16 warps of 32 dims per (row, head)). H200
# session 12, wide / sliced time (CUPTI span, same run), bf16 / fp8: call 1 (w64) T x H = 4,096 (T=64
# H=64, S=2) 0.594 (56.9 vs 95.8 us) / 0.659; 2,048 (T=32 H=64, S=4) 0.684 / 0.746, (T=64 H=32) 0.740 /
# 0.798. Call 2: 1,024 (w64 T=16 H=64 S=8) 0.851 / 0.877, (m16 T=64 H=16 S=4) 0.863 / 0.913; 512 (w64
# T=8 H=64 S=11) 0.889 / 0.916, (m16 T=32 H=16 S=8) 0.922 / 0.965, (n8w / n8r T=64 H=8 S=2) 0.925 /
# 0.931; 256 (w64 T=4 H=64 S=16) 1.094 / 1.071 and 32 (T=4 H=8 S=32) 1.965 / 1.817: too few warps to
# hide the partials' latency, the sliced kernel stays.
COMBINE_WIDE_MIN_ROWS = 512


def combine_wide(T: int, H: int, combine: str = "auto") -> bool:
    """Whether a call's S > 1 splits merge in the wide combine kernel: combine="wide" / "sliced"
    force it, anything else takes it from T x H >= COMBINE_WIDE_MIN_ROWS (shapes only: graph-safe)."""
    if combine in ("wide", "sliced"):
        return combine == "wide"
    return T * H >= COMBINE_WIDE_MIN_ROWS


# auto picks m16w at B=1 (H <= 16, sm_90a) only when this is True. Off: on the H200 (run 5) m16w
# was no faster in bf16 (11.49 vs m16's 11.31 us CUPTI span at B=1 n=4 H=8) and 7% faster in fp8
# (12.86 vs 13.82 us), and it has passed only two hostile parity cases (no graph replay, no full
# suite), while m16's code is unchanged since its quick parity incl. graph replay (run 4).
AUTO_M16W = False
# fp8 only, H <= 8, T < AUTO_N8_MIN_T: m16w when its grid fits one wave. H200 session 6 (the fp8 path
# with f16 products, full parity 216/216 incl. m16w): B=1 n=4 H=8 CUPTI span m16w 11.28 us, n8 12.43,
# m16 12.78 (same run, run 16).
AUTO_M16W_FP8 = True
# auto picks n8 (8 heads in the mma N, independent warps) for bf16 with H <= 8 on sm_90a from this
# many rows on. H200 run 8 (same run, CUPTI span, n8 / m16 time): T=8 0.977, T=64 0.865 (50.2 vs
# 58.0 us, SGLang's Triton 59.3), T=256 0.812 (145.8 vs 179.6 us: 99.8% of the floor, Triton
# 144.1); at T=4 (B=1 n=4) n8 is slower (1.087). fp8 (session 6, raw e4m3 in f16 with the scales
# outside the tensor cores, same run, n8 / m16): 0.940 (T=4), 0.972 (T=8), 0.906 (T=64), 0.912
# (T=256), so fp8 takes n8 from T=1 on.
AUTO_N8_MIN_T = 8
AUTO_N8_MIN_T_FP8 = 1
# ... and n8w (7 warps, one raw stage each) from this many rows on: same run (session 6, n8w / n8
# CUPTI span): bf16 T=64 0.801, T=256 0.741 (below the no-sharing floor: a request's rows share L2
# lines), fp8 T=64 0.863, T=256 0.779; at T=4 / T=8 n8w is slower (bf16 1.283 / 1.096, fp8 1.447 /
# 1.134); run 15: T=32 0.865 (bf16) / 0.898 (fp8), T=16 0.985 / 1.012.
AUTO_N8W_MIN_T = 32
# fp8 with H <= 8 takes n8r (8 warps, e4m3 converted in registers) from this many rows on. H200 run
# 17 (session 7, same run, CUPTI span): n8r / n8 at T=8 0.823; n8r / n8w at T=64 0.803, T=256 0.741;
# at T=4 n8r / m16w 1.072 (so B=1 n=4 keeps m16w).
AUTO_N8R_MIN_T_FP8 = 8
# sm_120a: fp8 with H <= 8 takes n8rw (7 warps x 1 raw stage, in-register e4m3) from this many rows
# on, else m16. Session 8, under the sm_120 occupancy emulation on the H200 (every sm_120a config
# holds one CTA per SM there; same run, CUPTI span, n8rw / m16): T=4 1.350, T=8 0.921, T=64 0.507,
# T=256 0.402.
AUTO_N8RW_MIN_T_FP8 = 8
# sm_90a, bf16 cache: w64 (wgmma, 64 heads per CTA) from this many heads on (m64's range: both pad
# to 64 heads). H200 session 10 (same run, CUPTI span, w64 / m64, the auto before): call 1 H=64 T=256
# 0.406 (180.2 vs 443.6 us, 87.8% of the floor), T=64 0.593, T=4 0.710; H=128 T=64 0.417, T=8 0.651;
# call 2 H=32 T=256 0.386, T=64 0.510, T=4 0.690. H=16 keeps m16 (w64 / m16: T=256 0.956, T=4 1.128).
# The fp8 cache too, on w64's fp8 kernel (H200 session 11 call 1, w64 / m64 fp8: H=64 T=256 0.459,
# T=64 0.596, T=4 0.721; H=128 T=64 0.458; H=32 T=64 0.541; H=16 w64 / m16 1.089 at T=256: m16 stays).
AUTO_W64_MIN_H = 17
# H = 16 (DeepSeek-V3.2 at TP8) takes w64 from this many rows on, either cache, since w64's one-chain fp8
# kernel (session 14). H200 session 14 call 3, same run, w64 / m16 (auto before): bf16 T=4 1.132, T=8
# 0.959, T=16 1.004, T=64 0.937, T=256 0.955; fp8 T=4 1.159, T=8 0.931, T=16 0.919, T=64 0.914, T=256
# 0.926 (B=1 n=4, B=1 n=8, B=4 n=4, B=8 n=8, B=32 n=8; L=32k). H = 9..15 keep m16 (not measured).
AUTO_W64_H16_MIN_T = 8


def _max_clusters(mod, device, cfg: tiles.TileConfig, fp8: bool, size: int) -> int:
    key = (device.index, cfg.name, fp8, size)
    if key not in _CLUSTERS:
        import torch

        with torch.cuda.device(device):
            _CLUSTERS[key] = max(0, int(mod.config_max_clusters(cfg.index, fp8, size)))
    return _CLUSTERS[key]


def _pow2_floor(n: int) -> int:
    return 1 << (max(1, n).bit_length() - 1)


def _chunk_for(topk: int, splits: int, cfg: tiles.TileConfig) -> tuple[int, int]:
    chunk = math.ceil(math.ceil(topk / splits) / cfg.block_n) * cfg.block_n
    return math.ceil(topk / chunk), chunk


def resolve(device, H: int, topk: int, T: int, fp8: bool, tile_config="auto", num_splits=None, combine="auto"):
    """(module, TileConfig, S, chunk) for a call shape on `device` (host-only, cached)."""
    mod, cfg, S, chunk, _, _ = resolve_full(device, H, topk, T, fp8, tile_config, num_splits, combine)
    return mod, cfg, S, chunk


def resolve_full(device, H: int, topk: int, T: int, fp8: bool, tile_config="auto", num_splits=None, combine="auto"):
    """resolve() plus whether the split grid fits one resident wave (early combine launch) and the
    cluster size (0: fp32 workspace + combine kernel; S: the S splits of a (row, head tile) run as
    one thread-block cluster that merges in DSMEM; sm_90a, configs tiles.CLUSTER_CONFIGS only).

    combine="auto" and "kernel": the combine kernel (run 4 measured the cluster merge no faster:
    the PDL-launched combine already overlaps the split grid), wide or sliced by combine_wide();
    "wide" / "sliced" force that combine kernel; "cluster" requires the cluster
    (an automatic plan is rounded down to a power of two <= 16). With AUTO_M16W set and
    tile_config="auto" on sm_90a with H <= 16, the 8-warp m16w config with one 64-position tile
    per split replaces m16 when that grid fits one wave (B=1 latency regime; off by default).
    tile_config="auto" with H <= 8 on sm_90a (no cluster asked) and T >= AUTO_N8_MIN_T (bf16) or
    T >= AUTO_N8_MIN_T_FP8 (fp8): n8, and n8w from T >= AUTO_N8W_MIN_T; fp8 takes n8r from
    T >= AUTO_N8R_MIN_T_FP8, and with T < AUTO_N8_MIN_T m16w instead of n8 when that grid fits one
    wave (AUTO_M16W_FP8). On sm_120a, fp8 with H <= 8 takes n8rw from T >= AUTO_N8RW_MIN_T_FP8.
    On sm_90a H >= AUTO_W64_MIN_H takes w64 (wgmma; no cluster combine), either cache, and so does
    H = 16 from T >= AUTO_W64_H16_MIN_T.
    An fp8-only config (n8r, n8rw) refuses a bf16 cache, a bf16-only one (n8x) an fp8 cache.
    A tiles.EXPERIMENTAL_CONFIGS name (never auto) runs on the experimental JIT build
    (_build.load_experimental; sm_90a only). Under emulate_sm120_occupancy, sm_120a's rules apply."""
    from ._build import load, load_experimental

    if combine not in COMBINES:
        _fail("combine", f"must be one of {'/'.join(COMBINES)}, got {combine!r}")
    arch, sms = device_info(device)
    policy = "sm_120a" if _SM120_OCCUPANCY else arch  # whose rules pick and check the config
    auto_cfg = tile_config == "auto"
    if auto_cfg:
        cfg = tiles.default_config(policy, H)
    elif tile_config in tiles.EXPERIMENTAL_CONFIGS:
        cfg = tiles.EXPERIMENTAL_CONFIGS[tile_config]
        if arch != "sm_90a":
            _fail("tile_config", f"{tile_config} (experimental) is built for sm_90a only, not {arch}")
    else:
        cfg = named_config(tile_config, tiles.CONFIGS, tiles.ARCH_CONFIGS[policy], policy)
    if cfg.fp8_only and not fp8:
        _fail("tile_config", f"{tile_config} takes an fp8 (656-byte) cache only")
    if cfg.bf16_only and fp8:
        _fail("tile_config", f"{tile_config} takes a bf16 (1152-byte) cache only")
    small_fp8 = fp8 and T < AUTO_N8_MIN_T  # fp8 B=1: m16w below when it fits one wave, else n8
    if (
        auto_cfg
        and policy == "sm_90a"
        and H <= tiles.N8.block_m
        and T >= (AUTO_N8_MIN_T_FP8 if fp8 else AUTO_N8_MIN_T)
        and combine != "cluster"
    ):
        cfg = tiles.N8W if T >= AUTO_N8W_MIN_T else tiles.N8
        if fp8 and T >= AUTO_N8R_MIN_T_FP8:
            cfg = tiles.N8R
    if auto_cfg and policy == "sm_120a" and fp8 and H <= tiles.N8RW.block_m and T >= AUTO_N8RW_MIN_T_FP8:
        cfg = tiles.N8RW
    w64_rows = H >= AUTO_W64_MIN_H or (H == 16 and T >= AUTO_W64_H16_MIN_T)
    if auto_cfg and policy == "sm_90a" and w64_rows and combine != "cluster":
        cfg = tiles.W64
    experimental = _SM120_OCCUPANCY or cfg.name in tiles.EXPERIMENTAL_CONFIGS
    mod = load_experimental(arch) if experimental else load(arch)
    if num_splits is None:
        S, chunk = split_plan(T, H, topk, sms, _ctas_per_sm(mod, device, cfg, fp8), cfg)
    else:
        if isinstance(num_splits, bool) or not isinstance(num_splits, int) or not 1 <= num_splits <= MAX_SPLITS:
            _fail("num_splits", f"must be an int in [1, {MAX_SPLITS}], got {num_splits!r}")
        S, chunk = _chunk_for(topk, num_splits, cfg)
    m_tiles = math.ceil(H / cfg.block_m)
    m16w_fp8 = AUTO_M16W_FP8 and small_fp8 and cfg is tiles.N8
    if auto_cfg and num_splits is None and policy == "sm_90a" and ((AUTO_M16W and cfg is tiles.M16) or m16w_fp8):
        # B=1 latency regime: 8 warps on one 64-position tile per split, when that grid fits one
        # wave at one CTA per SM (run 4: the m16 time grows ~2 us per 32-position tile a CTA owns)
        w = tiles.M16W
        sw = math.ceil(topk / w.block_n)
        if sw <= MAX_SPLITS and T * m_tiles * sw <= sms * _ctas_per_sm(mod, device, w, fp8):
            cfg, S, chunk = w, sw, w.block_n
    cluster = 0
    if combine == "cluster" and policy == "sm_90a" and cfg.name in tiles.CLUSTER_CONFIGS and S > 1:
        sc = _pow2_floor(min(S, tiles.MAX_CLUSTER)) if num_splits is None else S
        s2, c2 = _chunk_for(topk, sc, cfg)
        if s2 == _pow2_floor(s2) and 2 <= s2 <= tiles.MAX_CLUSTER and _max_clusters(mod, device, cfg, fp8, s2) >= 1:
            S, chunk, cluster = s2, c2, s2
    if combine == "cluster" and not cluster and S > 1:
        _fail("combine", f"a cluster of {S} splits cannot run here ({arch}, {cfg.name}; sizes 2..16, powers of two)")
    one_wave = T * math.ceil(H / cfg.block_m) * S <= sms * _ctas_per_sm(mod, device, cfg, fp8)
    return mod, cfg, S, chunk, one_wave, cluster


def trace_numel(T: int, H: int, num_splits: int, cfg: tiles.TileConfig, cluster: int = 0, wide: bool = False) -> int:
    """int64 words of a diagnostic timeline: 8 per split CTA, plus 8 per combine CTA (csrc
    combine_blocks, 4 warps per CTA: sliced, 4 CTAs per (row, head) of 16 one-slice warps; wide, one
    CTA per 4 (row, head) pairs)."""
    split_ctas = T * num_splits * math.ceil(H / cfg.block_m)
    combine_ctas = 0
    if num_splits > 1 and not cluster:
        combine_ctas = math.ceil(T * H / 4) if wide else T * H * 4
    return 8 * (split_ctas + combine_ctas)


def workspace_numel_for(q_all, kv_cache, page_table_1, tile_config="auto", num_splits=None, combine="auto") -> int:
    """Workspace elements (fp32) a call with these tensors needs: allocate it once, before capture
    (0 when the plan does not split or merges its splits in a cluster)."""
    fp8 = kv_cache.shape[-1] == FP8_ROW_BYTES
    T, H, topk = int(q_all.shape[0]), int(q_all.shape[1]), int(page_table_1.shape[1])
    _, _, S, _, _, cluster = resolve_full(q_all.device, H, topk, T, fp8, tile_config, num_splits, combine)
    return 0 if cluster else workspace_numel(S, T, H)


def dsa_verify_fwd(
    q_all,
    kv_cache,
    page_table_1,
    seq_lens,
    sm_scale,
    *,
    out=None,
    lse=None,
    workspace=None,
    num_splits=None,
    tile_config="auto",
    combine="auto",
    trace=None,
):
    """Sparse MLA verify attention (see the module docstring); returns out [T, H, 512] bf16.

    `workspace`: fp32 CUDA tensor with >= workspace_numel_for(...) elements (required under CUDA
    graph capture when the plan splits; otherwise mla_verify.api.cached_workspace's buffer, grown on
    first use without freeing the smaller one).
    `num_splits` / `tile_config` ("auto" or a tiles.CONFIGS name) / `combine` ("auto",
    "kernel", "sliced", "wide", "cluster": see resolve_full) override the heuristics (tests, bench).
    `trace` (diagnostics only): a contiguous int64 CUDA tensor of >= trace_numel(...) words; the
    call then runs the DSAV_TRACE build (_build.load_trace, JIT) and fills the per-CTA timeline."""
    import torch

    sz = validate(q_all, kv_cache, page_table_1, seq_lens, sm_scale, out, lse)
    T, H, topk, fp8 = sz["T"], sz["H"], sz["topk"], sz["fp8"]
    mod, cfg, S, chunk, one_wave, cluster = resolve_full(
        q_all.device, H, topk, T, fp8, tile_config, num_splits, combine
    )
    if out is None:
        out = torch.empty(T, H, D_V, dtype=torch.bfloat16, device=q_all.device)
    if T == 0:
        return out
    need = 0 if cluster else workspace_numel(S, T, H)
    wide = combine_wide(T, H, combine)
    if need:
        if workspace is None:
            workspace = cached_workspace(q_all.device, need, owner="dsa_verify")
        else:
            if not (
                _is_tensor(workspace)
                and workspace.dtype == torch.float32
                and workspace.is_contiguous()
                and workspace.device == q_all.device
            ):
                _fail("workspace", "must be a contiguous float32 tensor on q_all's device")
            if workspace.numel() < need:
                _fail("workspace", f"needs {need} float32 elements, got {workspace.numel()}")
    kv = kv_cache.view(torch.uint8) if kv_cache.dtype == torch.float8_e4m3fn else kv_cache
    extra = ()
    fwd = mod.fwd
    if trace is not None:
        from ._build import load_trace

        need_tr = trace_numel(T, H, S, cfg, cluster, wide)
        if not (
            _is_tensor(trace)
            and trace.dtype == torch.int64
            and trace.is_contiguous()
            and trace.device == q_all.device
            and trace.numel() >= need_tr
        ):
            _fail("trace", f"must be a contiguous int64 tensor on q_all's device with >= {need_tr} elements")
        fwd = load_trace(device_info(q_all.device)[0]).fwd_trace
        extra = (trace,)
    fwd(
        q_all,
        kv.reshape(kv.shape[0], kv.shape[-1]) if kv.dim() == 3 else kv,
        page_table_1,
        seq_lens,
        out,
        lse,
        int(fp8),
        S,
        chunk,
        cfg.index,
        float(sm_scale) * LOG2E,
        workspace if need else None,
        int(one_wave and S > 1 and not cluster),
        int(cluster),
        int(wide),
        *extra,
    )
    return out


def why_unsupported(q_all, kv_cache, page_table_1, seq_lens, sm_scale, out=None, lse=None) -> str | None:
    """None when dsa_verify_fwd handles this call, else the reason (never raises)."""
    try:
        validate(q_all, kv_cache, page_table_1, seq_lens, sm_scale, out, lse)
        device_info(q_all.device)
    except (ValueError, TypeError, RuntimeError, AssertionError, AttributeError) as exc:
        return str(exc)
    return None


def supports(*args, **kwargs) -> bool:
    return why_unsupported(*args, **kwargs) is None
