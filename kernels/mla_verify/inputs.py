"""Synthetic MLA verify inputs in SGLang's layout (shared by the parity suite, bench and tests).

A case is B requests; request b has a prefix of L_b cached tokens (page_size = 1 slots drawn at
random from a pool, i.e. permuted, optionally sharing the first `shared_prefix` slots across
requests like a radix-cache prefix) and n_b draft tokens whose tree is a chain or a random tree
with branching (topk > 1). Unused pool slots can be NaN-poisoned so any stray gather shows.
The FULL-layout mask gets random prefix columns: only the draft columns may be read.
kv_dtype="fp8" stores the cache as SGLang's fp8_e4m3 MLA pool does (MLATokenToKVPool, uint8
storage viewed as float8_e4m3fn; the backend writes k / k_scale cast to fp8): the kernel gets
the fp8 k_buffer and the per-tensor k_scale / v_scale floats, the oracle gets the dequantized
values (fp8 * k_scale for the keys, fp8[:512] * v_scale for the values) in float32. Drafts stay bf16.
"""

from __future__ import annotations

from dataclasses import dataclass, field

DEEPSEEK_SM_SCALE = 192**-0.5 * 1.3689**2  # 0.1352: qk_head_dim 192, YaRN mscale^2


@dataclass(frozen=True)
class CaseSpec:
    name: str
    prefix_lens: tuple
    draft_lens: tuple
    heads: int
    tree: str = "tree"  # "tree" (random, topk > 1), "chain", "causal" (no mask), "full" (no mask)
    shared_prefix: int = 0  # leading prefix slots shared by all requests
    poison: bool = True  # NaN in unused pool slots
    v_alias: bool = False  # v_extend = k_extend[..., :512] view (else a separate copy)
    index64: bool = False  # int64 qo/kv indptr (CUDA-graph style), bool mask
    sm_scale: float = DEEPSEEK_SM_SCALE
    seed: int = 0
    kv_dtype: str = "bf16"  # "bf16" or "fp8" (float8_e4m3fn cache with k_scale / v_scale)
    k_scale: float = 1.0
    v_scale: float = 1.0
    notes: str = ""
    extra: dict = field(default_factory=dict, compare=False)

    @property
    def batch(self) -> int:
        return len(self.prefix_lens)


def tree_parents(n: int, kind: str, gen) -> list:
    """Parent index per draft token (-1: child of the last prefix token); parents precede children."""
    import torch

    if kind in ("chain", "causal"):
        return [i - 1 for i in range(n)]
    parents = [-1]
    for i in range(1, n):
        # topk > 1: pick any earlier node (or the root) as parent, so siblings branch
        parents.append(int(torch.randint(-1, i, (1,), generator=gen).item()))
    return parents


def tree_visibility(parents: list):
    """[n, n] bool: token i sees itself and its ancestors."""
    import torch

    n = len(parents)
    vis = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        j = i
        while j >= 0:
            vis[i, j] = True
            j = parents[j]
    return vis


def make_inputs(spec: CaseSpec, device="cpu") -> dict:
    """Tensors for one case, keyword names as in extend_attention_fwd, plus 'parents' and 'meta'."""
    import torch

    B, H = spec.batch, spec.heads
    assert len(spec.draft_lens) == B, "draft_lens must have one entry per request"
    gen = torch.Generator().manual_seed(spec.seed)
    L = list(spec.prefix_lens)
    n = list(spec.draft_lens)
    T = sum(n)
    shared = min([spec.shared_prefix] + L) if spec.shared_prefix else 0
    unique_prefix = shared + sum(l - shared for l in L)
    used = unique_prefix + T
    pool = int(used * 1.25) + 16
    perm = torch.randperm(pool - 1, generator=gen) + 1  # slot 0 stays the padded dummy slot
    shared_slots = perm[:shared]
    pos = shared
    kv_chunks = []
    for l in L:
        own = perm[pos : pos + l - shared]
        pos += l - shared
        kv_chunks.append(torch.cat([shared_slots, own]))
    draft_slots = perm[pos : pos + T]
    kv_indices = torch.cat(kv_chunks) if kv_chunks else torch.zeros(0, dtype=torch.long)
    k_buffer = torch.randn(pool, 1, 576, generator=gen).to(torch.bfloat16)
    q = torch.randn(T, H, 576, generator=gen).to(torch.bfloat16)
    k_extend = torch.randn(T, 1, 576, generator=gen).to(torch.bfloat16)
    if spec.poison:
        used_mask = torch.zeros(pool, dtype=torch.bool)
        used_mask[kv_indices] = True
        used_mask[draft_slots] = True
        k_buffer[~used_mask] = float("nan")
    k_buffer[draft_slots] = k_extend  # the draft KV already sits in its cache slots
    ref_k = ref_v = None
    if spec.kv_dtype == "fp8":
        k_buffer = (k_buffer.float() / spec.k_scale).to(torch.float8_e4m3fn)
        ref_k = k_buffer.float() * spec.k_scale
        ref_v = k_buffer[..., :512].float() * spec.v_scale
    elif spec.kv_dtype != "bf16":
        raise ValueError(f"kv_dtype must be bf16 or fp8, got {spec.kv_dtype!r}")
    itype = torch.int64 if spec.index64 else torch.int32
    qo_indptr = torch.tensor([0] + list(torch.cumsum(torch.tensor(n), 0).tolist()), dtype=itype)
    kv_indptr = torch.tensor([0] + list(torch.cumsum(torch.tensor(L), 0).tolist()), dtype=itype)
    parents, mask_parts, mask_starts = [], [], [0]
    for b in range(B):
        par = tree_parents(n[b], spec.tree, gen)
        parents.append(par)
        full = torch.randint(0, 2, (n[b], L[b] + n[b]), generator=gen).to(torch.bool)  # prefix cols: noise
        full[:, L[b] :] = tree_visibility(par)
        mask_parts.append(full.flatten())
        mask_starts.append(mask_starts[-1] + n[b] * (L[b] + n[b]))
    if spec.tree in ("causal", "full"):
        custom_mask, mask_indptr = None, None
    else:
        custom_mask = torch.cat(mask_parts).to(torch.bool if spec.index64 else torch.uint8)
        mask_indptr = torch.tensor(mask_starts[:-1] + [mask_starts[-1]], dtype=torch.int64)
    dev = torch.device(device)
    k_buffer = k_buffer.to(dev)
    k_extend = k_extend.to(dev)
    v_extend = k_extend[..., :512] if spec.v_alias else k_extend[..., :512].contiguous()
    out = dict(
        q_extend=q.to(dev),
        k_extend=k_extend,
        v_extend=v_extend,
        o_extend=torch.empty(T, H, 512, dtype=torch.bfloat16, device=dev),
        k_buffer=k_buffer,
        v_buffer=k_buffer[..., :512],
        qo_indptr=qo_indptr.to(dev),
        kv_indptr=kv_indptr.to(dev),
        kv_indices=kv_indices.to(dev),
        custom_mask=None if custom_mask is None else custom_mask.to(dev),
        is_causal=spec.tree != "full",
        mask_indptr=None if mask_indptr is None else mask_indptr.to(dev),
        max_len_extend=max(n),
        sm_scale=spec.sm_scale,
        k_scale=spec.k_scale if spec.kv_dtype == "fp8" else 1.0,
        v_scale=spec.v_scale if spec.kv_dtype == "fp8" else 1.0,
    )
    if ref_k is not None:
        out["ref_k_buffer"], out["ref_v_buffer"] = ref_k.to(dev), ref_v.to(dev)
    out["parents"] = parents
    out["draft_slots"] = draft_slots.to(dev)  # cache slots holding the drafts' KV (paged peers append them)
    out["meta"] = {"B": B, "T": T, "H": H, "prefix_lens": L, "draft_lens": n, "pool_slots": pool}
    return out


KERNEL_ARGS = (
    "q_extend",
    "k_extend",
    "v_extend",
    "o_extend",
    "k_buffer",
    "v_buffer",
    "qo_indptr",
    "kv_indptr",
    "kv_indices",
    "custom_mask",
    "is_causal",
    "mask_indptr",
    "max_len_extend",
)


def kernel_args(inp: dict) -> tuple:
    """Positional arguments of mla_verify_fwd / extend_attention_fwd for `inp`."""
    return tuple(inp[k] for k in KERNEL_ARGS)


def kernel_kwargs(inp: dict) -> dict:
    """Keyword scalars of mla_verify_fwd for `inp` (k_scale / v_scale of an fp8 cache, sm_scale)."""
    return {"k_scale": inp.get("k_scale", 1.0), "v_scale": inp.get("v_scale", 1.0), "sm_scale": inp["sm_scale"]}


def oracle_kwargs(inp: dict) -> dict:
    keys = (
        "q_extend",
        "k_extend",
        "v_extend",
        "k_buffer",
        "v_buffer",
        "qo_indptr",
        "kv_indptr",
        "kv_indices",
        "custom_mask",
        "is_causal",
        "mask_indptr",
        "sm_scale",
    )
    out = {k: inp[k] for k in keys}
    if "ref_k_buffer" in inp:  # fp8 cache: the oracle sees the dequantized values
        out["k_buffer"], out["v_buffer"] = inp["ref_k_buffer"], inp["ref_v_buffer"]
    return out


def fp8_codes_inputs(spec: CaseSpec, device="cpu") -> dict:
    """Exactness probe of the fp8 dequantization: one request per head count given, a single
    prefix key whose 576 fp8 bytes cycle through all 254 finite e4m3fn codes (subnormals, zeros
    of both signs, +-448) and one draft key masked out, so softmax weight 1 falls on the prefix key
    and o[t, h, :] must equal the key's first 512 decoded values bit for bit (k_scale = v_scale = 1).
    Slot 0 and the draft's slot hold NaN codes (0x7f): a stray read shows."""
    import torch

    B, H = spec.batch, spec.heads
    gen = torch.Generator().manual_seed(spec.seed)
    codes = torch.tensor([c for c in range(256) if c & 0x7F != 0x7F], dtype=torch.uint8)
    pool = 2 * B + 1
    raw = torch.full((pool, 1, 576), 0x7F, dtype=torch.uint8)
    for b in range(B):
        shift = int(torch.randint(0, codes.numel(), (1,), generator=gen))
        raw[1 + b, 0] = codes.roll(shift).repeat(3)[:576]
    k_buffer = raw.view(torch.float8_e4m3fn)
    kv_indices = torch.arange(1, B + 1, dtype=torch.int64)
    q = (torch.randn(B, H, 576, generator=gen) * 0.01).to(torch.bfloat16)
    k_extend = torch.randn(B, 1, 576, generator=gen).to(torch.bfloat16)
    qo_indptr = torch.arange(B + 1, dtype=torch.int32)
    kv_indptr = torch.arange(B + 1, dtype=torch.int32)
    custom_mask = torch.zeros(B * 2, dtype=torch.uint8)  # per request [1 prefix col (noise), 1 draft col = 0]
    custom_mask[0::2] = 1
    mask_indptr = torch.arange(0, 2 * B + 1, 2, dtype=torch.int64)
    dev = torch.device(device)
    ref_k = k_buffer.float()
    k_buffer = k_buffer.to(dev)  # one device copy: v_buffer must be its view
    return dict(
        q_extend=q.to(dev),
        k_extend=k_extend.to(dev),
        v_extend=k_extend[..., :512].contiguous().to(dev),
        o_extend=torch.empty(B, H, 512, dtype=torch.bfloat16, device=dev),
        k_buffer=k_buffer,
        v_buffer=k_buffer[..., :512],
        qo_indptr=qo_indptr.to(dev),
        kv_indptr=kv_indptr.to(dev),
        kv_indices=kv_indices.to(dev),
        custom_mask=custom_mask.to(dev),
        is_causal=True,
        mask_indptr=mask_indptr.to(dev),
        max_len_extend=1,
        sm_scale=spec.sm_scale,
        k_scale=1.0,
        v_scale=1.0,
        ref_k_buffer=ref_k.to(dev),
        ref_v_buffer=ref_k[..., :512].to(dev),
        parents=[[-1]] * B,
        meta={"B": B, "T": B, "H": H, "prefix_lens": [1] * B, "draft_lens": [1] * B, "pool_slots": pool},
    )
