"""SGLang's DSA fp8 KV-cache row (656 bytes per token) and bf16 row (576 bf16), torch only.

fp8 row: bytes [0, 512) e4m3 of dims 0..511; [512, 528) four fp32 scales, scale k covering dims
[128k, 128k+128), value = e4m3 * scale, scale = amax / 448 (SGLang's quantize_k_cache: no eps, so
an all-zero block gets scale 0; `quantize_rows` then writes zero bytes); [528, 656) the 64 rope
dims as bf16, unquantized. V is dims 0..511 of the same row (the kernel dequantizes once for K and V).
"""

from __future__ import annotations

D_NOPE, D_ROPE, GROUP = 512, 64, 128
N_SCALES = D_NOPE // GROUP  # 4
FP8_ROW_BYTES = D_NOPE + 4 * N_SCALES + 2 * D_ROPE  # 656
BF16_ROW = D_NOPE + D_ROPE  # 576
FP8_MAX = 448.0


def pack_rows(nope_e4m3, scales, rope):
    """[N, 512] e4m3 (float8_e4m3fn or uint8 bytes), [N, 4] fp32, [N, 64] bf16 -> [N, 656] uint8."""
    import torch

    n = nope_e4m3.shape[0]
    if tuple(nope_e4m3.shape) != (n, D_NOPE):
        raise ValueError(f"nope_e4m3: shape must be [N, {D_NOPE}], got {tuple(nope_e4m3.shape)}")
    if nope_e4m3.dtype not in (torch.float8_e4m3fn, torch.uint8):
        raise ValueError(f"nope_e4m3: dtype must be float8_e4m3fn or uint8, got {nope_e4m3.dtype}")
    if tuple(scales.shape) != (n, N_SCALES) or scales.dtype != torch.float32:
        raise ValueError(f"scales: must be float32 [N, {N_SCALES}], got {scales.dtype} {tuple(scales.shape)}")
    if tuple(rope.shape) != (n, D_ROPE) or rope.dtype != torch.bfloat16:
        raise ValueError(f"rope: must be bfloat16 [N, {D_ROPE}], got {rope.dtype} {tuple(rope.shape)}")
    out = torch.empty(n, FP8_ROW_BYTES, dtype=torch.uint8, device=nope_e4m3.device)
    out[:, :D_NOPE] = nope_e4m3.contiguous().view(torch.uint8)
    out[:, D_NOPE : D_NOPE + 16] = scales.contiguous().view(torch.uint8).reshape(n, 16)
    out[:, D_NOPE + 16 :] = rope.contiguous().view(torch.uint8).reshape(n, 2 * D_ROPE)
    return out


def unpack_rows(rows):
    """[N, 656] uint8 / float8_e4m3fn -> (nope float8_e4m3fn [N, 512], scales fp32 [N, 4], rope bf16 [N, 64])."""
    import torch

    if rows.dim() != 2 or rows.shape[1] != FP8_ROW_BYTES:
        raise ValueError(f"rows: shape must be [N, {FP8_ROW_BYTES}], got {tuple(rows.shape)}")
    b = rows.contiguous().view(torch.uint8)
    nope = b[:, :D_NOPE].contiguous().view(torch.float8_e4m3fn)
    scales = b[:, D_NOPE : D_NOPE + 16].contiguous().view(torch.float32)
    rope = b[:, D_NOPE + 16 :].contiguous().view(torch.bfloat16)
    return nope, scales, rope


def dequantize_rows(rows, dtype=None):
    """[N, 656] fp8 rows -> [N, 576] in `dtype` (float64 default): e4m3 * scale per 128 dims, rope as is."""
    import torch

    dtype = dtype or torch.float64
    nope, scales, rope = unpack_rows(rows)
    n = nope.shape[0]
    x = nope.to(dtype).reshape(n, N_SCALES, GROUP) * scales.to(dtype).reshape(n, N_SCALES, 1)
    return torch.cat([x.reshape(n, D_NOPE), rope.to(dtype)], dim=1)


def quantize_rows(kv, scale_mult=None):
    """[N, 576] float/bf16 -> [N, 656] uint8 as SGLang quantizes (scale = amax/448 per 128 dims).

    `scale_mult` ([N, 4] or broadcastable, optional) multiplies the stored scales after
    quantization and divides nothing: the dequantized value becomes e4m3 * scale * mult (used to
    build extreme-scale test rows whose true values are the dequantized ones)."""
    import torch

    if kv.dim() != 2 or kv.shape[1] != BF16_ROW:
        raise ValueError(f"kv: shape must be [N, {BF16_ROW}], got {tuple(kv.shape)}")
    n = kv.shape[0]
    x = kv[:, :D_NOPE].float().reshape(n, N_SCALES, GROUP)
    amax = x.abs().amax(dim=2)
    scale = amax / FP8_MAX
    inv = torch.where(scale > 0, 1.0 / scale, torch.zeros_like(scale))
    q8 = (x * inv[:, :, None]).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).reshape(n, D_NOPE)
    if scale_mult is not None:
        scale = scale * torch.as_tensor(scale_mult, dtype=torch.float32, device=kv.device)
    return pack_rows(q8, scale.float().contiguous(), kv[:, D_NOPE:].to(torch.bfloat16))


def quantize_cache(kv_cache):
    """A bf16 KV cache [slots, 1, 576] -> SGLang's fp8 cache [slots, 1, 656] uint8, each slot's row through
    quantize_rows (what the tools time and compare as the fp8 form of the same inputs)."""
    return quantize_rows(cache_rows(kv_cache)).reshape(kv_cache.shape[0], 1, FP8_ROW_BYTES)


def cache_rows(kv_cache):
    """The [slots, row] 2-D view of a [slots, 1, row] or [slots, row] cache (bf16 or fp8 bytes)."""
    return kv_cache.reshape(kv_cache.shape[0], kv_cache.shape[-1]) if kv_cache.dim() == 3 else kv_cache


def is_fp8_cache(kv_cache) -> bool:
    import torch

    return kv_cache.dtype in (torch.uint8, torch.float8_e4m3fn) and kv_cache.shape[-1] == FP8_ROW_BYTES
