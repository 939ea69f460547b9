"""Executor: applies a :class:`~kv_defrag.planner.Plan` to the KV buffers, then to the index.

KV buffers: a stacked tensor ``[layers, slots + 1, 1, 576]`` (bf16, or uint8 holding fp8), or a
list of SGLang per-layer tensors ``[slots + 1, 1, 576]``. Each step of the plan's schedule is
one batched operation over a chunk of layers (never a loop over tokens):

- "copy" steps (no destination is a source of the same step): on CUDA a single-pass Triton
  kernel (grid = moves x layers, one read and one write per byte); elsewhere, or with
  ``backend="torch"``, ``index_select`` + ``index_copy_`` (which stages through a temporary).
- "gather" / "scatter" steps: ``index_select`` into a staging tensor, ``index_copy_`` out of it.

Only after every copy has finished (device synchronised) are ``req_to_token`` (live positions,
remapped in place) and the free list updated. torch is imported inside functions.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from .planner import Plan
from .pool import KV_DIM, PoolError


@dataclass(frozen=True)
class ExecResult:
    """What the executor did. Seconds are wall time including device synchronisation."""

    backend: str
    launches: int
    copy_s: float
    index_s: float
    tokens_moved: int
    bytes_moved: int
    free_slots: np.ndarray
    note: str | None = None


def _triton_available() -> bool:
    try:
        import triton  # noqa: F401
        import triton.language  # noqa: F401
    except Exception:
        return False
    return True


_KERNELS: dict = {}
NSEG = 9  # a 576-wide row is 9 segments: 128 B (bf16) or 64 B (uint8), both 2^k int32 words


def _triton_kernel(kind: str):
    """Build (once) a single-pass copy kernel, ``buf[l, dst[i], :] = buf[l, src[i], :]`` over
    int32 words (W per row), grid (programs, layers):

    - "rows": a program copies BLOCK_M whole rows, lanes padded to the next power of two;
    - "segments": a program copies BLOCK_M (row, segment) pairs of W/9 words each, no padding.
    """
    if kind in _KERNELS:
        return _KERNELS[kind]
    import triton
    import triton.language as tl

    @triton.jit
    def copy_rows(buf, src, dst, n_moves, layer_stride, W: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr):
        pid = tl.program_id(0)
        layer = tl.program_id(1).to(tl.int64)
        rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
        rmask = rows < n_moves
        s = tl.load(src + rows, mask=rmask, other=0).to(tl.int64)
        d = tl.load(dst + rows, mask=rmask, other=0).to(tl.int64)
        cols = tl.arange(0, BLOCK_D)
        cmask = cols < W
        base = buf + layer * layer_stride
        m = rmask[:, None] & cmask[None, :]
        vals = tl.load(base + s[:, None] * W + cols[None, :], mask=m)
        tl.store(base + d[:, None] * W + cols[None, :], vals, mask=m)

    @triton.jit
    def copy_segments(
        buf, src, dst, n_moves, layer_stride, W: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr
    ):  # BLOCK_D = W // 9 (segment words)
        pid = tl.program_id(0)
        layer = tl.program_id(1).to(tl.int64)
        v = pid * BLOCK_M + tl.arange(0, BLOCK_M)
        vmask = v < n_moves * 9
        mv = v // 9
        seg = (v % 9).to(tl.int64)
        s = tl.load(src + mv, mask=vmask, other=0).to(tl.int64)
        d = tl.load(dst + mv, mask=vmask, other=0).to(tl.int64)
        so = tl.multiple_of(s * W + seg * BLOCK_D, BLOCK_D)
        do = tl.multiple_of(d * W + seg * BLOCK_D, BLOCK_D)
        cols = tl.arange(0, BLOCK_D)
        base = buf + layer * layer_stride
        vals = tl.load(base + so[:, None] + cols[None, :], mask=vmask[:, None])
        tl.store(base + do[:, None] + cols[None, :], vals, mask=vmask[:, None])

    _KERNELS.update(rows=copy_rows, segments=copy_segments)
    return _KERNELS[kind]


def _launch(kernel_kind: str, kernel, words, src, dst, block_m: int) -> None:
    w = words.shape[-1]
    n = src.numel()
    if kernel_kind == "rows":
        block_d = 1 << (w - 1).bit_length()
        grid = ((n + block_m - 1) // block_m, words.shape[0])
    else:
        block_d = w // NSEG
        grid = ((n * NSEG + block_m - 1) // block_m, words.shape[0])
    kernel[grid](words, src, dst, n, words.stride(0), W=w, BLOCK_M=block_m, BLOCK_D=block_d, num_warps=4)


def _layer_groups(kv, layers_per_launch: int | None):
    """4-D views ``[layers_in_chunk, slots + 1, 1, 576]`` covering every layer once."""
    import torch

    if isinstance(kv, torch.Tensor):
        if kv.dim() != 4 or kv.shape[-1] != KV_DIM or kv.shape[2] != 1:
            raise PoolError(f"kv: stacked buffers must be [layers, slots+1, 1, {KV_DIM}], got {tuple(kv.shape)}")
        if not kv.is_contiguous():
            raise PoolError("kv: stacked buffers must be contiguous")
        n = kv.shape[0]
        step = n if not layers_per_launch else max(1, int(layers_per_launch))
        return [kv[i : i + step] for i in range(0, n, step)]
    groups = []
    for i, t in enumerate(kv):
        if not isinstance(t, torch.Tensor) or t.dim() != 3 or t.shape[-1] != KV_DIM or not t.is_contiguous():
            raise PoolError(f"kv[{i}]: per-layer buffer must be a contiguous [slots+1, 1, {KV_DIM}] tensor")
        groups.append(t.unsqueeze(0))
    return groups


def _check_kv(groups, plan: Plan) -> None:
    import torch

    for g in groups:
        if g.dtype not in (torch.bfloat16, torch.uint8):
            raise PoolError(f"kv: dtype must be bfloat16 or uint8 (fp8 storage), got {g.dtype}")
        if g.shape[1] != plan.num_slots + 1:
            raise PoolError(f"kv: has {g.shape[1]} rows, the plan needs num_slots + 1 = {plan.num_slots + 1}")


def device_steps(plan: Plan, device) -> list:
    """The plan's schedule as (kind, src, dst) with int64 tensors on ``device`` (upload once)."""
    import torch

    return [
        (st.kind, torch.as_tensor(st.src, device=device), torch.as_tensor(st.dst, device=device))
        for rnd in plan.rounds
        for st in rnd.steps
    ]


def _auto_chunk(kv, steps, backend: str, budget_bytes: int) -> int | None:
    """Layers per launch so that a staging temporary stays under ``budget_bytes``: every step
    stages through a temporary with the torch backend, only gather steps with Triton."""
    import torch

    if not isinstance(kv, torch.Tensor):
        return None  # per-layer list: one layer per launch already
    rows = [int(s.numel()) for kind, s, _ in steps if backend == "torch" or kind == "gather"]
    if not rows or max(rows) == 0:
        return None
    per_layer = max(rows) * KV_DIM * kv.element_size()
    return max(1, min(kv.shape[0], budget_bytes // per_layer))


def run_copies(
    plan: Plan,
    kv,
    backend: str = "auto",
    layers_per_launch: int | None = None,
    block_m: int = 8,
    steps: list | None = None,
    staging_budget_bytes: int = 2 << 30,
    kernel_kind: str = "rows",
) -> tuple[str, int, str | None]:
    """Execute every step of every round on ``kv`` (no index update, no sync).

    kernel_kind / block_m: the Triton copy kernel ("rows": block_m rows per program;
        "segments": block_m 1/9-row segments per program).

    steps: from :func:`device_steps` (uploaded here when None).
    layers_per_launch: layers per batched launch; None: all layers, reduced so that staging
        temporaries stay under ``staging_budget_bytes``.
    Returns (backend used, kernel launches, why Triton was not used when it was asked for
    via "auto" and failed to compile, else None).
    """
    import torch

    probe = kv if isinstance(kv, torch.Tensor) else (kv[0] if len(kv) else None)
    dev = probe.device if probe is not None else torch.device("cpu")
    if backend == "auto":
        backend = "triton" if dev.type == "cuda" and _triton_available() else "torch"
        auto = True
    else:
        auto = False
    if backend not in ("torch", "triton"):
        raise PoolError(f"backend: must be auto, torch or triton, got {backend!r}")
    if steps is None:
        steps = device_steps(plan, dev)
    if layers_per_launch is None:
        layers_per_launch = _auto_chunk(kv, steps, backend, staging_budget_bytes)
    groups = _layer_groups(kv, layers_per_launch)
    _check_kv(groups, plan)
    launches = 0
    note = None
    if kernel_kind not in ("rows", "segments"):
        raise PoolError(f"kernel_kind: must be rows or segments, got {kernel_kind!r}")
    kernel = _triton_kernel(kernel_kind) if backend == "triton" else None
    for g in groups:
        staging = None
        for kind, src, dst in steps:
            if kind == "gather":
                staging = g.index_select(1, src)
            elif kind == "scatter":
                g.index_copy_(1, dst, staging)
                staging = None
            elif kernel is not None:
                try:
                    _launch(kernel_kind, kernel, g.view(torch.int32), src, dst, block_m)
                except Exception as e:  # noqa: BLE001 - compile failure before any copy: fall back
                    if not (auto and launches == 0):
                        raise
                    note = f"triton kernel unusable, used torch: {type(e).__name__}: {str(e)[:200]}"
                    kernel, backend = None, "torch"
                    g.index_copy_(1, dst, g.index_select(1, src))
            else:
                g.index_copy_(1, dst, g.index_select(1, src))
            launches += 1
    return backend, launches, note


def update_index(plan: Plan, req_to_token, seq_lens) -> None:
    """Remap the live positions of ``req_to_token`` in place (torch tensor on any device, or
    numpy). ``seq_lens``: per row, int, same row count. Rows and positions past seq_len are left as is."""
    if isinstance(req_to_token, np.ndarray):
        lens = np.asarray(seq_lens)
        live = np.arange(req_to_token.shape[1])[None, :] < lens[:, None]
        idx = np.clip(req_to_token, 0, plan.num_slots).astype(np.int64)
        req_to_token[live] = plan.remap[idx[live]].astype(req_to_token.dtype)
        return
    import torch

    dev = req_to_token.device
    lens = torch.as_tensor(np.asarray(seq_lens), device=dev)
    live = torch.arange(req_to_token.shape[1], device=dev)[None, :] < lens[:, None]
    remap = torch.as_tensor(plan.remap, device=dev)
    new = remap[req_to_token.long().clamp(0, plan.num_slots)].to(req_to_token.dtype)
    req_to_token.copy_(torch.where(live, new, req_to_token))


def _check_index_args(req_to_token, seq_lens) -> None:
    import torch

    is_t = isinstance(req_to_token, torch.Tensor)
    if (
        not (is_t or isinstance(req_to_token, np.ndarray))
        or req_to_token.ndim != 2
        or (req_to_token.dtype != (torch.int32 if is_t else np.int32))
    ):
        raise PoolError("req_to_token: must be an int32 [requests + 1, max_context] tensor or array")
    lens = np.asarray(seq_lens)
    if lens.shape != (req_to_token.shape[0],) or lens.dtype.kind not in "iu":
        raise PoolError(f"seq_lens: must be integers of shape ({req_to_token.shape[0]},)")
    if lens.size and (lens.min() < 0 or lens.max() > req_to_token.shape[1]):
        raise PoolError(f"seq_lens: values must lie in 0..{req_to_token.shape[1]}")


def _sync(kv) -> None:
    import torch

    first = kv if isinstance(kv, torch.Tensor) else (kv[0] if len(kv) else None)
    if first is not None and first.device.type == "cuda":
        torch.cuda.synchronize(first.device)


def execute(
    plan: Plan,
    kv,
    req_to_token=None,
    seq_lens=None,
    backend: str = "auto",
    layers_per_launch: int | None = None,
    kernel_kind: str = "rows",
    block_m: int = 8,
) -> ExecResult:
    """Copy every moved token in every layer, synchronise, then update ``req_to_token`` (if
    given) and return the new free list (``plan.free_after``)."""
    import torch

    if (req_to_token is None) != (seq_lens is None):
        raise PoolError("seq_lens: must be given together with req_to_token")
    if req_to_token is not None:
        _check_index_args(req_to_token, seq_lens)  # before any copy: bad input changes nothing
    t0 = time.perf_counter()
    used, launches, note = run_copies(plan, kv, backend, layers_per_launch, block_m=block_m, kernel_kind=kernel_kind)
    _sync(kv)
    t1 = time.perf_counter()
    if req_to_token is not None:
        update_index(plan, req_to_token, seq_lens)
        if isinstance(req_to_token, torch.Tensor) and req_to_token.device.type == "cuda":
            torch.cuda.synchronize(req_to_token.device)
    t2 = time.perf_counter()
    layers = kv.shape[0] if isinstance(kv, torch.Tensor) else len(kv)
    elem = (kv if isinstance(kv, torch.Tensor) else kv[0]).element_size()
    return ExecResult(
        used,
        launches,
        t1 - t0,
        t2 - t1,
        plan.tokens_moved,
        plan.bytes_moved(layers, elem),
        plan.free_after.copy(),
        note,
    )
