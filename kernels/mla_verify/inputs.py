"""Synthetic MLA verify inputs in SGLang's layout (shared by the parity suite, bench and tests).

A case is B requests; request b has a prefix of L_b cached tokens (page_size = 1 slots drawn at
random from a pool, i.e. permuted, optionally sharing the first `shared_prefix` slots across
requests like a radix-cache prefix) and n_b draft tokens whose tree is a chain or a random tree
with branching (topk > 1). Unused pool slots can be NaN-poisoned so any stray gather shows.
The FULL-layout mask gets random prefix columns: only the draft columns may be read.
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
    )
    out["parents"] = parents
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
    return {k: inp[k] for k in keys}
