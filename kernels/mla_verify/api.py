"""Python entry point of the bundled MLA target-verify kernel (SGLang extend_attention_fwd order).

Shapes (T = total draft tokens of the batch, H = query heads, B = requests):
  q_extend [T, H, 576] bf16; k_extend [T, 1, 576] bf16; v_extend [T, 1, 512] bf16;
  o_extend [T, H, 512] bf16 (written in place); k_buffer [slots, 1, 576] bf16 and
  v_buffer = k_buffer[..., :512] (same storage: MLA keeps V inside the latent);
  or an fp8 cache (SGLang --kv-cache-dtype fp8_e4m3, MLATokenToKVPool): k_buffer float8_e4m3fn
  (or its uint8 storage, read as e4m3fn) with per-tensor float k_scale / v_scale, exactly as
  extend_attention_fwd consumes them: prefix logits sm_scale * k_scale * q.k8, prefix values
  v_scale * v8; the draft rows k_extend / v_extend stay bf16 and unscaled. The kernel dequantizes
  the fp8 rows to bf16 in its loader (exact) and keeps q and P in bf16 (SGLang's Triton path casts
  q and P to fp8 instead);
  qo_indptr [B+1] int32/int64 (draft tokens), kv_indptr [B+1] int32/int64 (committed prefix),
  kv_indices int64 slot ids (page_size = 1, any order, slots may repeat across requests);
  custom_mask uint8/bool FULL layout (n_b x (L_b + n_b) per request from mask_indptr[b]; only
  the draft columns are read) or None (then is_causal picks causal or full draft visibility).
Every tensor must sit on one CUDA device, last dim contiguous, 16-byte aligned rows.
Values (indptr contents, slots) are not read on the host (CUDA-graph safe); out-of-range slots
or positions are zero-filled on the device instead of faulting.
"""

from __future__ import annotations

import math

from . import tiles

LOG2E = 1.4426950408889634
D_QK, D_V = 576, 512
MAX_SPLITS = 128
PARTIAL_CAP_BYTES = 48 * 2**20  # fp32 split partials written + read back, below the H200's 50 MB L2
FP8_SCHEDULES = (0, 1, 2)  # fp8 loader placements of the wgmma kernel (csrc/mla_verify_wgmma.cuh)
FP8_SCHEDULE_DEFAULT = 0
# The fp8 cache's two arithmetics, two kernel instances of a config that has both (tiles.TileConfig.fp8_f16_min_tokens
# > 0: sm90wg; F16 in csrc/mla_verify_wgmma.cuh; fp8_path below): "f16" runs the prefix tiles as f16 MMAs on one
# conversion per two fp8 values (Q rewritten per row by a power of two, exact; P written in f16), "bf16" decodes the
# fp8 rows to bf16 (five instructions per two values). f16 writes P x v_scale with P <= 2^8 (the lazy softmax): up
# to this v_scale the product stays at or below 2^15, half of f16's largest finite value. The f16 arithmetic has two
# kernels, chosen by the tokens of a split (tiles.TileConfig.fp8_ws_min_tokens): the same arithmetic, outputs within
# the oracle's bound of each other (not bitwise since session 44's ASYM consumers).
FP8_PATHS = ("auto", "bf16", "f16")
# fp8_graph_gate (mla_verify_fwd, fp8_f16): a captured fp8 call launches the bf16 decode (or the F16 kernel) and the
# warp-specialized kernel behind it, each CTA gated on the device by the replayed length, so every replay runs the
# kernel an eager call of its length runs. Off by default. Measured (session 48, H100, graph replays, L2 flushed):
# 0.847 / 0.878 / 0.905 of the captured bf16 decode at (4, 131072, 4, 16) / (8, 32768, 8, 16) / (1, 131072, 8, 16),
# but the pair takes 1.05-1.08x the warp-specialized kernel alone there, and on max-sized buffers the replays of
# 512-4,096 tokens run 1.10-1.12x their exact-length call at B = 1 and 4 (the shut grid's launch and completion; the
# graph-buffer bound is 1.1). Session 19 measured the same choice between the decode and the F16 kernel: 1.09-1.35x
# at B = 1 (dense-verify-notes.md, "Session 19", "Session 48").
FP8_MAX_V_SCALE = 128.0


def _fp8_cache_dtypes() -> tuple:
    import torch

    return (torch.float8_e4m3fn, torch.uint8)


class _LazyDtypes:
    """`x in FP8_CACHE_DTYPES` without importing torch at module import."""

    def __contains__(self, dt) -> bool:
        return dt in _fp8_cache_dtypes()


FP8_CACHE_DTYPES = _LazyDtypes()


def _is_tensor(x) -> bool:
    import torch

    return isinstance(x, torch.Tensor)


def _fail(name: str, msg: str):
    raise ValueError(f"{name}: {msg}")


def _check_rows(t, name: str, shape_tail: tuple, dtype) -> None:
    """Row tensor [N, *shape_tail] (None = any size) of `dtype`, last dim contiguous, 16-B rows.
    Messages are built only on failure (this runs on every call)."""
    if not _is_tensor(t):
        _fail(name, f"expected a torch.Tensor, got {type(t).__name__}")
    if t.dtype != dtype:
        _fail(name, f"dtype must be {str(dtype).replace('torch.', '')}, got {t.dtype}")
    shape = t.shape
    if len(shape) != 1 + len(shape_tail):
        _fail(name, f"expected {1 + len(shape_tail)} dims, got shape {tuple(shape)}")
    for i, want in enumerate(shape_tail):
        if want is not None and shape[1 + i] != want:
            _fail(name, f"dim {1 + i} must be {want}, got shape {tuple(shape)}")
    strides = t.stride()
    if strides[-1] != 1:
        _fail(name, "last dim must be contiguous (stride 1)")
    es = t.element_size()  # 16-byte rows in bytes: 8 bf16 elements, 16 fp8 ones (the fp8 loads are 16-byte too)
    for d in range(len(shape) - 1):
        if (strides[d] * es) % 16 and shape[d] != 1:
            _fail(name, f"stride({d})={strides[d]} must be a multiple of {16 // es} elements (16-byte rows)")
    if t.data_ptr() % 16 and t.numel():
        _fail(name, "data pointer must be 16-byte aligned")


def _check_index(t, name: str, dtypes: tuple, numel=None) -> None:
    if not _is_tensor(t):
        _fail(name, f"expected a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in dtypes:
        _fail(name, f"dtype must be {'/'.join(str(d).replace('torch.', '') for d in dtypes)}, got {t.dtype}")
    if t.dim() != 1:
        _fail(name, f"must be 1-D, got shape {tuple(t.shape)}")
    if not t.is_contiguous():
        _fail(name, "must be contiguous")
    if numel is not None and t.numel() != numel:
        _fail(name, f"must have {numel} elements, got {t.numel()}")


def named_config(tile_config: str, configs: dict, built, arch: str):
    """The config named `tile_config` among `configs` (name -> config), if it is among `built` (the
    configs compiled for `arch`); ValueError naming tile_config otherwise. Shared with dsa_verify."""
    if tile_config not in configs:
        _fail("tile_config", f"must be auto/{'/'.join(configs)}, got {tile_config!r}")
    cfg = configs[tile_config]
    if cfg not in built:
        _fail("tile_config", f"{tile_config} is not built for {arch}")
    return cfg


def validate(
    q_extend,
    k_extend,
    v_extend,
    o_extend,
    k_buffer,
    v_buffer,
    qo_indptr,
    kv_indptr,
    kv_indices,
    custom_mask,
    is_causal,
    mask_indptr,
    max_len_extend,
    k_scale=1.0,
    v_scale=1.0,
    sm_scale=None,
    logit_cap=0.0,
    *,
    require_cuda: bool = True,
) -> dict:
    """Check every argument (ValueError naming it); returns derived host-side sizes."""
    import torch

    bf16, i32, i64 = torch.bfloat16, torch.int32, torch.int64
    _check_rows(q_extend, "q_extend", (None, D_QK), bf16)
    T, H = int(q_extend.shape[0]), int(q_extend.shape[1])
    if not 1 <= H <= 128:
        _fail("q_extend", f"head count must be in [1, 128], got {H}")
    kv_fp8 = _is_tensor(k_buffer) and k_buffer.dtype in FP8_CACHE_DTYPES
    cache_dtype = k_buffer.dtype if kv_fp8 else bf16
    for name, t, tail, shape0, dtype in (
        ("k_extend", k_extend, (1, D_QK), T, bf16),
        ("v_extend", v_extend, (1, D_V), T, bf16),
        ("o_extend", o_extend, (H, D_V), T, bf16),
        ("k_buffer", k_buffer, (1, D_QK), None, cache_dtype),
        ("v_buffer", v_buffer, (1, D_V), None, cache_dtype),
    ):
        _check_rows(t, name, tail, dtype)
        if shape0 is not None and t.shape[0] != shape0:
            _fail(name, f"dim 0 must equal q_extend's T={T}, got {t.shape[0]}")
    if k_buffer.shape[0] < 1:
        _fail("k_buffer", "needs at least one slot")
    if not (
        v_buffer.data_ptr() == k_buffer.data_ptr()
        and v_buffer.stride(0) == k_buffer.stride(0)
        and v_buffer.shape[0] == k_buffer.shape[0]
    ):
        _fail("v_buffer", "must be the view k_buffer[..., :512] (MLA stores V inside the latent row)")
    _check_index(qo_indptr, "qo_indptr", (i32, i64))
    B = qo_indptr.numel() - 1
    if B < 1:
        _fail("qo_indptr", "needs at least 2 elements (B+1)")
    _check_index(kv_indptr, "kv_indptr", (i32, i64), numel=B + 1)
    _check_index(kv_indices, "kv_indices", (i64,))
    if custom_mask is not None:
        _check_index(custom_mask, "custom_mask", (torch.uint8, torch.bool))
        if mask_indptr is None:
            _fail("mask_indptr", "required when custom_mask is given")
        _check_index(mask_indptr, "mask_indptr", (i32, i64), numel=B + 1)
    if not isinstance(is_causal, bool):
        _fail("is_causal", f"must be a bool, got {type(is_causal).__name__}")
    if not (isinstance(max_len_extend, int) and not isinstance(max_len_extend, bool) and max_len_extend >= 1):
        _fail("max_len_extend", f"must be an int >= 1, got {max_len_extend!r}")
    if max_len_extend > max(T, 1):
        _fail("max_len_extend", f"{max_len_extend} exceeds the T={T} draft tokens")
    for name, val in (("k_scale", k_scale), ("v_scale", v_scale)):
        if not isinstance(val, (int, float)) or isinstance(val, bool):  # a tensor would need a host sync
            _fail(name, f"must be a Python float (SGLang passes layer.k_scale_float), got {type(val).__name__}")
        if kv_fp8 and not (math.isfinite(val) and val > 0):
            _fail(name, f"must be a finite positive float for an fp8 cache, got {val!r}")
        if not kv_fp8 and float(val) != 1.0:
            _fail(name, f"only 1.0 is supported with a bf16 cache, got {val}")
    if float(logit_cap) != 0.0:
        _fail("logit_cap", f"only 0.0 is supported, got {logit_cap}")
    if sm_scale is not None and not (isinstance(sm_scale, (int, float)) and math.isfinite(sm_scale) and sm_scale > 0):
        _fail("sm_scale", f"must be a finite positive float, got {sm_scale!r}")
    dev = q_extend.device
    named = (
        ("q_extend", q_extend),
        ("k_extend", k_extend),
        ("v_extend", v_extend),
        ("o_extend", o_extend),
        ("k_buffer", k_buffer),
        ("qo_indptr", qo_indptr),
        ("kv_indptr", kv_indptr),
        ("kv_indices", kv_indices),
    )
    if custom_mask is not None:
        named += (("custom_mask", custom_mask), ("mask_indptr", mask_indptr))
    for name, t in named:
        if t.device != dev:
            _fail(name, f"on {t.device}, but q_extend is on {dev}")
        if require_cuda and not t.is_cuda:
            _fail(name, "must be a CUDA tensor")
    return {"B": B, "T": T, "H": H, "kv_fp8": kv_fp8}


class SplitRule(tuple):
    """Host-known half of the split rule: (s_cap, draft_tiles, bn, part_div); see choose_num_splits.

    The kernel receives these four integers and evaluates `splits_for_total` itself on the real
    prefix total (kv_indptr[B] - kv_indptr[0]) when the split count is automatic, so a CUDA graph
    captured on max-size buffers runs, at each replay, the split count of an eager call at the
    replayed length (mla_verify_kernel.cuh, effective_splits: the same integer result)."""

    __slots__ = ()

    def __new__(cls, s_cap: int, draft_tiles: int, bn: int, part_div: int):
        return super().__new__(cls, (s_cap, draft_tiles, bn, part_div))

    s_cap = property(lambda self: self[0])
    draft_tiles = property(lambda self: self[1])
    bn = property(lambda self: self[2])
    part_div = property(lambda self: self[3])


def split_rule(
    B: int,
    max_len_extend: int,
    H: int,
    num_sms: int,
    cfg: tiles.TileConfig,
    ctas_per_sm: int | None = None,
) -> SplitRule:
    """The parts of the split rule that do not depend on the prefix lengths (host sizes only)."""
    m_tiles = -(-max_len_extend * H // cfg.block_m)
    ctas = B * m_tiles
    slots = num_sms * (ctas_per_sm or cfg.ctas_per_sm_hint)
    s_cap = 1 if ctas >= 0.8 * slots else max(1, min(slots // ctas, MAX_SPLITS))
    return SplitRule(s_cap, -(-max_len_extend // cfg.block_n), cfg.block_n, B * max_len_extend * H * 513 * 4 * 2)


def request_length(B: int, prefix_tokens_total: int) -> int:
    """The split rule's prefix length per request: ceil(total / B), capped at the device's 32-bit int."""
    return min(-(-max(0, int(prefix_tokens_total)) // max(1, B)), 2**31 - 1)


def split_chunk(length: int, splits: int, bn: int) -> int:
    """Prefix tokens of one split (the device's work_of): ceil(length / splits) rounded up to whole bn tiles."""
    per_split = -(-length // splits)
    return -(-per_split // bn) * bn


def splits_for_total(rule: SplitRule, B: int, prefix_tokens_total: int, grid_splits: int = MAX_SPLITS) -> int:
    """Split count for a batch of B requests with `prefix_tokens_total` prefix tokens in all,
    capped at `grid_splits` (what a launch sized for that many splits can run). The device
    evaluates this for automatic split counts, with the same integer result for every total."""
    total = max(0, int(prefix_tokens_total))
    if rule.s_cap <= 1 or grid_splits <= 1 or total < 1:
        return 1
    length = request_length(B, total)
    part_cap = max(total * 1152, PARTIAL_CAP_BYTES)
    s_max = max(1, min(rule.s_cap, part_cap // rule.part_div, grid_splits))
    bn = rule.bn
    best, best_cost = 1, None
    for s in range(1, s_max + 1):
        chunk = split_chunk(length, s, bn)
        last = max(0, length - (s - 1) * chunk)
        cost = max(chunk // bn if s > 1 else 0, -(-last // bn) + rule.draft_tiles)
        if best_cost is None or cost < best_cost:
            best, best_cost = s, cost
    return best


def choose_num_splits(
    B: int,
    max_len_extend: int,
    H: int,
    prefix_tokens_total: int,
    num_sms: int,
    cfg: tiles.TileConfig,
    ctas_per_sm: int | None = None,
) -> int:
    """Prefix splits per request from host-known sizes only (no device read: graph safe).

    At most about one wave (num_sms * CTAs/SM) of CTAs, and the fp32 partial traffic (S * rows *
    513 * 4 B, written then read back) capped to the KV bytes or 48 MiB (L2-resident), whichever is
    larger (the sm90wg bf16 kernel's token-split launches write bf16 partials, half that: the cap,
    kept as measured, is conservative there). Within that, S minimizes the tiles on the critical CTA, computed with the device's own
    split rule (chunk = ceil(L / S) rounded up to whole tiles; the last split also runs the draft
    tiles), the smallest such S on ties. So the draft tile gets a split of its own when that is
    free: B=1 L=4k..32k n=8 H=16 gives S=65 (64 prefix splits + the draft's). Measured on the H200
    (v4): the v3 rule (>= 2 tiles per split, 32 MiB cap) chose 32 / 63 / 63 / 66 there, whose last
    split ran a prefix tile and the draft tile (except at 32k); S=66 (64 prefix splits, an empty
    one, the draft's) ran 7.2 / 6.1 / 7.5 / 0% faster than the v3 choice and 64 prefix splits with
    the draft on the last one 2-4% slower. `prefix_tokens_total` may overestimate (CUDA-graph
    buffers): the launch is then sized (grid, workspace) for that total, and the kernel runs the
    count of the real total (kv_indptr on the device), capped at this one.
    `ctas_per_sm` defaults to the config's residency on sm_90 (tiles.ctas_per_sm gives it per arch).
    """
    rule = split_rule(B, max_len_extend, H, num_sms, cfg, ctas_per_sm)
    return splits_for_total(rule, B, prefix_tokens_total)


def fp8_f16(
    fp8_path: str,
    kv_fp8: bool,
    cfg: tiles.TileConfig,
    v_scale: float,
    B: int,
    prefix_tokens_total: int,
    num_splits: int,
    capturing: bool = False,
    graph_gate: bool = False,
) -> int:
    """The fp8 arithmetic (see FP8_PATHS) as the launch flag: 0 the bf16 decode, 1 the config's F16 kernel, 2 its
    warp-specialized fp8 kernel (the same arithmetic; ASYM consumers, session 44: not bitwise) where a split's prefix
    chunk (the device's: ceil(ceil(total / B) / num_splits) rounded up to whole block_n tiles) holds at least
    cfg.fp8_ws_min_tokens. "auto": f16 where the config has an F16 instance, v_scale <= FP8_MAX_V_SCALE and the chunk
    holds at least cfg.fp8_f16_min_tokens: the F16 kernel pays a Q conversion per CTA, which only a long enough chunk
    repays (1.09-1.24x the bf16 decode's time at 64-128 tokens per split, H200). "f16": 1 or 2 by the chunk; "bf16":
    0. An explicit "f16" the call cannot take is refused (ValueError naming fp8_path or v_scale); with a bf16 cache
    every fp8_path runs the one bf16 kernel.

    A CUDA-graph capture (`capturing`): SGLang captures on its max-sized index buffers, so the sizes say nothing of
    the lengths a replay runs, and by default a replay keeps its capture's kernel: "auto" the bf16 decode, "f16" the
    kernel of the capture's chunk. With `graph_gate` (opt-in: the note at FP8_PATHS) a capture whose chunk reaches
    cfg.fp8_ws_min_tokens gets the gated pair instead, 3 for "auto" (the bf16 decode) and 4 for "f16" (the F16
    kernel), each with the warp-specialized kernel behind it: the device picks per replay the kernel an eager call of
    that length runs ("auto"'s middle range, where an eager call takes the F16 kernel, replays on the bf16 decode)."""
    if fp8_path not in FP8_PATHS:
        _fail("fp8_path", f"must be one of {FP8_PATHS}, got {fp8_path!r}")
    has_f16 = cfg.fp8_f16_min_tokens > 0
    chunk = split_chunk(request_length(B, prefix_tokens_total), max(1, num_splits), cfg.block_n)
    f16_kernel = 2 if 0 < cfg.fp8_ws_min_tokens <= chunk else 1
    if fp8_path == "f16" and kv_fp8:
        if not has_f16:
            names = ", ".join(c.name for c in tiles.CONFIGS.values() if c.fp8_f16_min_tokens > 0)
            _fail("fp8_path", f"'f16' needs a config with an f16 fp8 kernel ({names}), not {cfg.name}")
        if v_scale > FP8_MAX_V_SCALE:
            _fail("v_scale", f"{v_scale} exceeds {FP8_MAX_V_SCALE}, the most the f16 fp8 path's P takes")
        return 4 if capturing and graph_gate and f16_kernel == 2 else f16_kernel
    if not kv_fp8 or not has_f16 or fp8_path == "bf16" or v_scale > FP8_MAX_V_SCALE:
        return 0
    if capturing:
        return 3 if graph_gate and f16_kernel == 2 else 0
    return f16_kernel if chunk >= cfg.fp8_f16_min_tokens else 0


def workspace_numel(num_splits: int, T: int, H: int) -> int:
    """fp32 elements of the split-K workspace: S*T*H*512 partial outputs + S*T*H lse values."""
    return 0 if num_splits <= 1 else num_splits * T * H * 513


_WS_CACHE: dict = {}
_WS_OUTGROWN: list = []  # cached workspaces replaced by larger ones, never freed: see cached_workspace


def cached_workspace(device, numel: int, owner: str = "mla_verify"):
    """fp32 workspace of >= numel elements from a per-(owner, device) cache grown to the largest size seen.

    A CUDA graph captured on a cached workspace writes to its address on every replay, so growing the
    cache keeps the smaller tensor alive (in _WS_OUTGROWN) instead of freeing it: otherwise a replay after
    a larger eager call writes freed memory (session 30: an illegal address in the split kernel's lse
    store). The cost is the memory of every size outgrown; callers that capture should pass their own
    persistent workspace (the SGLang plugin does).
    """
    import torch

    key = (owner, str(device))
    ws = _WS_CACHE.get(key)
    if ws is None or ws.numel() < numel:
        if ws is not None:
            _WS_OUTGROWN.append(ws)
        ws = torch.empty(numel, dtype=torch.float32, device=device)
        _WS_CACHE[key] = ws
    return ws


_DEVICE_INFO: dict = {}


def device_info(device) -> tuple:
    """(arch, SM count) of a CUDA device, cached (host-side only, no sync); the DSA kernel uses it too."""
    key = (device.type, device.index)
    info = _DEVICE_INFO.get(key)
    if info is None:
        import torch

        from ._build import arch_for_capability

        props = torch.cuda.get_device_properties(device)
        info = (arch_for_capability(props.major, props.minor), props.multi_processor_count)
        _DEVICE_INFO[key] = info
    return info


def device_arch(device) -> str:
    return device_info(device)[0]


def mla_verify_fwd(
    q_extend,
    k_extend,
    v_extend,
    o_extend,
    k_buffer,
    v_buffer,
    qo_indptr,
    kv_indptr,
    kv_indices,
    custom_mask,
    is_causal,
    mask_indptr,
    max_len_extend,
    k_scale=1.0,
    v_scale=1.0,
    sm_scale=None,
    logit_cap=0.0,
    *,
    workspace=None,
    num_splits=None,
    tile_config="auto",
    fp8_schedule=None,
    fp8_path="auto",
    fp8_graph_gate=False,
):
    """MLA verify attention; writes o_extend [T, H, 512] in place and returns it.

    sm_scale defaults to 576**-0.5 (SGLang's default for Lq = 576). `workspace`: optional fp32
    CUDA tensor with >= workspace_numel(S, T, H) elements (pass one under CUDA-graph capture; without
    one, cached_workspace's buffer, which a larger call replaces without freeing it).
    `num_splits` / `tile_config` ("auto", "sm90wg", "sm90", "sm120") override the heuristics (testing);
    with num_splits=None the launch (grid, workspace) is sized by choose_num_splits on
    kv_indices.numel() and the kernel runs the split count of the real prefix total read from
    kv_indptr on the device (the same rule, capped at the launch's): bitwise the output of an
    explicit num_splits of that count, also when a CUDA graph replays it at another length;
    `fp8_schedule` (0/1/2) picks the fp8 loader placement of the wgmma kernel (testing, benchmarks);
    `fp8_path` ("auto", "bf16", "f16") its fp8 arithmetic (fp8_f16); `fp8_graph_gate` (off by default: the
    note at FP8_PATHS) lets a CUDA-graph capture of an fp8 call pick its kernel per replay (fp8_f16's flags 3, 4).
    """
    import torch

    sizes = validate(
        q_extend,
        k_extend,
        v_extend,
        o_extend,
        k_buffer,
        v_buffer,
        qo_indptr,
        kv_indptr,
        kv_indices,
        custom_mask,
        is_causal,
        mask_indptr,
        max_len_extend,
        k_scale,
        v_scale,
        sm_scale,
        logit_cap,
    )
    B, T, H = sizes["B"], sizes["T"], sizes["H"]
    arch, sms = device_info(q_extend.device)
    if tile_config == "auto":
        cfg = tiles.DEFAULT_CONFIG[arch]
    else:
        cfg = named_config(tile_config, tiles.CONFIGS, tiles.ARCH_CONFIGS[arch], arch)
    rule = split_rule(B, max_len_extend, H, sms, cfg, tiles.ctas_per_sm(cfg, arch))
    split_auto = num_splits is None
    if split_auto:
        num_splits = splits_for_total(rule, B, kv_indices.numel())
    if fp8_schedule is None:
        fp8_schedule = FP8_SCHEDULE_DEFAULT
    if fp8_schedule not in FP8_SCHEDULES:
        _fail("fp8_schedule", f"must be one of {FP8_SCHEDULES}, got {fp8_schedule!r}")
    if not (isinstance(num_splits, int) and 1 <= num_splits <= MAX_SPLITS):
        _fail("num_splits", f"must be an int in [1, {MAX_SPLITS}], got {num_splits!r}")
    capturing = q_extend.is_cuda and torch.cuda.is_current_stream_capturing()
    f16 = fp8_f16(
        fp8_path, sizes["kv_fp8"], cfg, float(v_scale), B, kv_indices.numel(), num_splits, capturing, fp8_graph_gate
    )
    need = workspace_numel(num_splits, T, H)
    if need:
        if workspace is None:
            workspace = cached_workspace(q_extend.device, need)
        else:
            if not (
                _is_tensor(workspace)
                and workspace.dtype == torch.float32
                and workspace.is_contiguous()
                and workspace.device == q_extend.device
            ):
                _fail("workspace", "must be a contiguous fp32 tensor on q_extend's device")
            if workspace.numel() < need:
                _fail("workspace", f"needs {need} fp32 elements, got {workspace.numel()}")
    scale = float(sm_scale) if sm_scale is not None else D_QK**-0.5
    if custom_mask is not None:
        mask_mode = 0
        mask_u8 = custom_mask.view(torch.uint8) if custom_mask.dtype == torch.bool else custom_mask
    else:
        mask_mode, mask_u8 = (1 if is_causal else 2), None
    v_alias = int(v_extend.data_ptr() == k_extend.data_ptr() and v_extend.stride(0) == k_extend.stride(0))
    from ._build import load

    mod = load(arch)
    mod.fwd(
        q_extend,
        k_extend,
        v_extend,
        o_extend,
        k_buffer,
        qo_indptr,
        kv_indptr,
        kv_indices,
        mask_u8,
        mask_indptr if custom_mask is not None else None,
        mask_mode,
        v_alias,
        num_splits,
        cfg.index,
        max_len_extend,
        scale * LOG2E,
        workspace if need else None,
        float(k_scale) if sizes["kv_fp8"] else 1.0,
        float(v_scale) if sizes["kv_fp8"] else 1.0,
        int(fp8_schedule),
        int(split_auto),
        *rule,
        f16,  # last: verify_tools.bench's tree A/B drops it for a tree built before it existed
    )
    return o_extend


def why_unsupported(*args, **kwargs) -> str | None:
    """None when mla_verify_fwd handles this call, else the reason (never raises for bad input)."""
    try:
        validate(*args, **kwargs)
        device_arch(args[0].device)
    except (ValueError, TypeError, RuntimeError, AssertionError) as exc:
        return str(exc)
    return None


def supports(*args, **kwargs) -> bool:
    """Whether mla_verify_fwd handles a call with these arguments (same order as the kernel)."""
    return why_unsupported(*args, **kwargs) is None
