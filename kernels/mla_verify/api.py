"""Python entry point of the bundled MLA target-verify kernel (SGLang extend_attention_fwd order).

Shapes (T = total draft tokens of the batch, H = query heads, B = requests):
  q_extend [T, H, 576] bf16; k_extend [T, 1, 576] bf16; v_extend [T, 1, 512] bf16;
  o_extend [T, H, 512] bf16 (written in place); k_buffer [slots, 1, 576] bf16 and
  v_buffer = k_buffer[..., :512] (same storage: MLA keeps V inside the latent);
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


def _is_tensor(x) -> bool:
    import torch

    return isinstance(x, torch.Tensor)


def _need(cond: bool, name: str, msg: str) -> None:
    if not cond:
        raise ValueError(f"{name}: {msg}")


def _check_rows(t, name: str, shape_tail: tuple, dtype_names=("bfloat16",)) -> None:
    import torch

    _need(_is_tensor(t), name, f"expected a torch.Tensor, got {type(t).__name__}")
    _need(str(t.dtype).replace("torch.", "") in dtype_names, name, f"dtype must be {'/'.join(dtype_names)}, got {t.dtype}")
    _need(t.dim() == 1 + len(shape_tail), name, f"expected {1 + len(shape_tail)} dims, got shape {tuple(t.shape)}")
    for i, want in enumerate(shape_tail):
        if want is not None:
            _need(t.shape[1 + i] == want, name, f"dim {1 + i} must be {want}, got shape {tuple(t.shape)}")
    _need(t.stride(-1) == 1, name, "last dim must be contiguous (stride 1)")
    for d in range(t.dim() - 1):
        _need(t.stride(d) % 8 == 0 or t.shape[d] == 1, name, f"stride({d})={t.stride(d)} must be a multiple of 8 elements (16-byte rows)")
    _need(t.data_ptr() % 16 == 0 or t.numel() == 0, name, "data pointer must be 16-byte aligned")
    del torch


def _check_index(t, name: str, dtypes=("int32", "int64"), numel=None) -> None:
    _need(_is_tensor(t), name, f"expected a torch.Tensor, got {type(t).__name__}")
    _need(str(t.dtype).replace("torch.", "") in dtypes, name, f"dtype must be {'/'.join(dtypes)}, got {t.dtype}")
    _need(t.dim() == 1, name, f"must be 1-D, got shape {tuple(t.shape)}")
    _need(t.is_contiguous(), name, "must be contiguous")
    if numel is not None:
        _need(t.numel() == numel, name, f"must have {numel} elements, got {t.numel()}")


def validate(q_extend, k_extend, v_extend, o_extend, k_buffer, v_buffer, qo_indptr, kv_indptr, kv_indices,
             custom_mask, is_causal, mask_indptr, max_len_extend, k_scale=1.0, v_scale=1.0, sm_scale=None,
             logit_cap=0.0, *, require_cuda: bool = True) -> dict:
    """Check every argument (ValueError naming it); returns derived host-side sizes."""
    _check_rows(q_extend, "q_extend", (None, D_QK))
    T, H = int(q_extend.shape[0]), int(q_extend.shape[1])
    _need(1 <= H <= 128, "q_extend", f"head count must be in [1, 128], got {H}")
    _check_rows(k_extend, "k_extend", (1, D_QK))
    _need(k_extend.shape[0] == T, "k_extend", f"dim 0 must equal q_extend's T={T}, got {k_extend.shape[0]}")
    _check_rows(v_extend, "v_extend", (1, D_V))
    _need(v_extend.shape[0] == T, "v_extend", f"dim 0 must equal q_extend's T={T}, got {v_extend.shape[0]}")
    _check_rows(o_extend, "o_extend", (H, D_V))
    _need(o_extend.shape[0] == T, "o_extend", f"dim 0 must equal q_extend's T={T}, got {o_extend.shape[0]}")
    _check_rows(k_buffer, "k_buffer", (1, D_QK))
    _need(k_buffer.shape[0] >= 1, "k_buffer", "needs at least one slot")
    _check_rows(v_buffer, "v_buffer", (1, D_V))
    _need(v_buffer.data_ptr() == k_buffer.data_ptr() and v_buffer.stride(0) == k_buffer.stride(0)
          and v_buffer.shape[0] == k_buffer.shape[0], "v_buffer",
          "must be the view k_buffer[..., :512] (MLA stores V inside the latent row)")
    _check_index(qo_indptr, "qo_indptr")
    B = qo_indptr.numel() - 1
    _need(B >= 1, "qo_indptr", "needs at least 2 elements (B+1)")
    _check_index(kv_indptr, "kv_indptr", numel=B + 1)
    _check_index(kv_indices, "kv_indices", dtypes=("int64",))
    if custom_mask is not None:
        _check_index(custom_mask, "custom_mask", dtypes=("uint8", "bool"))
        _need(mask_indptr is not None, "mask_indptr", "required when custom_mask is given")
        _check_index(mask_indptr, "mask_indptr", numel=B + 1)
    _need(isinstance(is_causal, bool), "is_causal", f"must be a bool, got {type(is_causal).__name__}")
    _need(isinstance(max_len_extend, int) and not isinstance(max_len_extend, bool) and max_len_extend >= 1,
          "max_len_extend", f"must be an int >= 1, got {max_len_extend!r}")
    _need(max_len_extend <= max(T, 1), "max_len_extend", f"{max_len_extend} exceeds the T={T} draft tokens")
    _need(float(k_scale) == 1.0, "k_scale", f"only 1.0 is supported (bf16 cache), got {k_scale}")
    _need(float(v_scale) == 1.0, "v_scale", f"only 1.0 is supported (bf16 cache), got {v_scale}")
    _need(float(logit_cap) == 0.0, "logit_cap", f"only 0.0 is supported, got {logit_cap}")
    if sm_scale is not None:
        _need(isinstance(sm_scale, (int, float)) and math.isfinite(sm_scale) and sm_scale > 0, "sm_scale",
              f"must be a finite positive float, got {sm_scale!r}")
    named = {"q_extend": q_extend, "k_extend": k_extend, "v_extend": v_extend, "o_extend": o_extend,
             "k_buffer": k_buffer, "qo_indptr": qo_indptr, "kv_indptr": kv_indptr, "kv_indices": kv_indices}
    if custom_mask is not None:
        named.update(custom_mask=custom_mask, mask_indptr=mask_indptr)
    dev = q_extend.device
    for name, t in named.items():
        _need(t.device == dev, name, f"on {t.device}, but q_extend is on {dev}")
        if require_cuda:
            _need(t.is_cuda, name, "must be a CUDA tensor")
    return {"B": B, "T": T, "H": H}


def choose_num_splits(B: int, max_len_extend: int, H: int, prefix_tokens_total: int, num_sms: int,
                      cfg: tiles.TileConfig) -> int:
    """Prefix splits per request from host-known sizes only (no device read: graph safe).

    Targets about one wave (num_sms * CTAs/SM) of CTAs, keeps >= 2 KV tiles per split, and caps
    the fp32 partial traffic (S * rows * 513 * 4 B, written then read back) to the KV bytes or
    32 MiB (L2-resident), whichever is larger. `prefix_tokens_total` may overestimate (CUDA-graph buffers).
    """
    m_tiles = math.ceil(max_len_extend * H / cfg.block_m)
    ctas = B * m_tiles
    slots = num_sms * cfg.ctas_per_sm_hint
    if ctas >= 0.8 * slots:
        return 1
    l_avg = prefix_tokens_total / B
    s = max(1, slots // ctas)
    s = min(s, max(1, int(l_avg // (2 * cfg.block_n))))
    rows = B * max_len_extend * H
    part_cap = max(prefix_tokens_total * 1152, 32 * 2**20)
    s = min(s, max(1, int(part_cap // (rows * 513 * 4 * 2))))
    return int(max(1, min(s, MAX_SPLITS)))


def workspace_numel(num_splits: int, T: int, H: int) -> int:
    """fp32 elements of the split-K workspace: S*T*H*512 partial outputs + S*T*H lse values."""
    return 0 if num_splits <= 1 else num_splits * T * H * 513


_WS_CACHE: dict = {}


def _workspace(device, numel: int):
    """Cached workspace grown to the largest size seen (allocate before graph capture)."""
    import torch

    key = str(device)
    ws = _WS_CACHE.get(key)
    if ws is None or ws.numel() < numel:
        ws = torch.empty(numel, dtype=torch.float32, device=device)
        _WS_CACHE[key] = ws
    return ws


_DEVICE_INFO: dict = {}


def _device_info(device) -> tuple:
    """(arch, SM count) of a CUDA device, cached (host-side only, no sync)."""
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
    return _device_info(device)[0]


def mla_verify_fwd(q_extend, k_extend, v_extend, o_extend, k_buffer, v_buffer, qo_indptr, kv_indptr,
                   kv_indices, custom_mask, is_causal, mask_indptr, max_len_extend, k_scale=1.0, v_scale=1.0,
                   sm_scale=None, logit_cap=0.0, *, workspace=None, num_splits=None, tile_config="auto"):
    """MLA verify attention; writes o_extend [T, H, 512] in place and returns it.

    sm_scale defaults to 576**-0.5 (SGLang's default for Lq = 576). `workspace`: optional fp32
    CUDA tensor with >= workspace_numel(S, T, H) elements (pass one under CUDA-graph capture).
    `num_splits` / `tile_config` ("auto", "sm90", "sm120") override the heuristics (testing).
    """
    import torch

    sizes = validate(q_extend, k_extend, v_extend, o_extend, k_buffer, v_buffer, qo_indptr, kv_indptr,
                     kv_indices, custom_mask, is_causal, mask_indptr, max_len_extend, k_scale, v_scale,
                     sm_scale, logit_cap)
    B, T, H = sizes["B"], sizes["T"], sizes["H"]
    arch, sms = _device_info(q_extend.device)
    if tile_config == "auto":
        cfg = tiles.DEFAULT_CONFIG[arch]
    else:
        _need(tile_config in tiles.CONFIGS, "tile_config", f"must be auto/sm90/sm120, got {tile_config!r}")
        cfg = tiles.CONFIGS[tile_config]
        _need(cfg in tiles.ARCH_CONFIGS[arch], "tile_config", f"{tile_config} is not built for {arch}")
    if num_splits is None:
        num_splits = choose_num_splits(B, max_len_extend, H, kv_indices.numel(), sms, cfg)
    _need(isinstance(num_splits, int) and 1 <= num_splits <= MAX_SPLITS, "num_splits",
          f"must be an int in [1, {MAX_SPLITS}], got {num_splits!r}")
    need = workspace_numel(num_splits, T, H)
    if need:
        if workspace is None:
            workspace = _workspace(q_extend.device, need)
        else:
            _need(_is_tensor(workspace) and workspace.dtype == torch.float32 and workspace.is_contiguous()
                  and workspace.device == q_extend.device, "workspace", "must be a contiguous fp32 tensor on q's device")
            _need(workspace.numel() >= need, "workspace", f"needs {need} fp32 elements, got {workspace.numel()}")
    scale = float(sm_scale) if sm_scale is not None else D_QK ** -0.5
    if custom_mask is not None:
        mask_mode = 0
        mask_u8 = custom_mask.view(torch.uint8) if custom_mask.dtype == torch.bool else custom_mask
    else:
        mask_mode, mask_u8 = (1 if is_causal else 2), None
    v_alias = int(v_extend.data_ptr() == k_extend.data_ptr() and v_extend.stride(0) == k_extend.stride(0))
    from ._build import load

    mod = load(arch)
    mod.fwd(q_extend, k_extend, v_extend, o_extend, k_buffer, qo_indptr, kv_indptr, kv_indices, mask_u8,
            mask_indptr if custom_mask is not None else None, mask_mode, v_alias, num_splits, cfg.index,
            max_len_extend, scale * LOG2E, workspace if need else None)
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
