"""The float64 oracle is MLA verify attention: tree mask from the draft columns of SGLang's FULL
mask layout, gather by slot, exact softmax. Checked against a brute-force per-row loop."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from mla_verify.inputs import CaseSpec, make_inputs, oracle_kwargs, tree_parents, tree_visibility  # noqa: E402
from mla_verify.reference import draft_visibility, mla_verify_ref  # noqa: E402


def brute_force(inp):
    """Row by row: list the visible keys explicitly, softmax in Python floats."""
    q, kb, ke, ve = inp["q_extend"], inp["k_buffer"], inp["k_extend"], inp["v_extend"]
    qo, kv = inp["qo_indptr"].tolist(), inp["kv_indptr"].tolist()
    idx, mask, mind = inp["kv_indices"].tolist(), inp["custom_mask"], inp["mask_indptr"]
    scale = inp["sm_scale"]
    T, H, _ = q.shape
    out = torch.zeros(T, H, 512, dtype=torch.float64)
    for b in range(len(qo) - 1):
        L, n = kv[b + 1] - kv[b], qo[b + 1] - qo[b]
        for i in range(n):
            keys, vals = [], []
            for p in range(L):
                slot = idx[kv[b] + p]
                keys.append(kb[slot, 0].double())
                vals.append(kb[slot, 0, :512].double())
            for j in range(n):
                if mask is None:
                    visible = (j <= i) if inp["is_causal"] else True
                else:
                    visible = bool(mask[int(mind[b]) + i * (L + n) + L + j])
                if visible:
                    keys.append(ke[qo[b] + j, 0].double())
                    vals.append(ve[qo[b] + j, 0].double())
            for h in range(H):
                qv = q[qo[b] + i, h].double()
                logits = [float(qv @ k) * scale for k in keys]
                mx = max(logits)
                w = [math.exp(x - mx) for x in logits]
                tot = sum(w)
                out[qo[b] + i, h] = sum(wi / tot * v for wi, v in zip(w, vals))
    return out


def small(name="t", prefix=(5, 0, 9), drafts=(3, 4, 2), heads=2, **kw):
    return make_inputs(CaseSpec(name, prefix, drafts, heads, **kw))


def test_random_tree_matches_brute_force_row_loop():
    inp = small(seed=3)
    assert torch.allclose(mla_verify_ref(**oracle_kwargs(inp)), brute_force(inp), rtol=1e-10, atol=1e-12)


def test_shared_prefix_slots_match_brute_force():
    inp = small(prefix=(6, 6, 8), drafts=(2, 2, 3), shared_prefix=4, seed=4)
    idx = inp["kv_indices"]
    assert torch.equal(idx[0:4], idx[6:10]) and torch.equal(idx[0:4], idx[12:16]), "first 4 slots are shared"
    assert torch.allclose(mla_verify_ref(**oracle_kwargs(inp)), brute_force(inp), rtol=1e-10, atol=1e-12)


def test_prefix_zero_attends_only_to_visible_draft_tokens():
    inp = small(prefix=(0,), drafts=(3,), heads=1, tree="chain", seed=5)
    out = mla_verify_ref(**oracle_kwargs(inp))
    # the first draft token of a chain sees only itself: its output is its own value row
    assert torch.allclose(out[0, 0], inp["v_extend"][0, 0].double(), atol=1e-12)
    assert torch.allclose(out, brute_force(inp), rtol=1e-10, atol=1e-12)


def test_varlen_batch_requests_are_independent():
    inp = small(prefix=(7, 2, 11), drafts=(1, 5, 3), seed=6)
    full = mla_verify_ref(**oracle_kwargs(inp))
    kw = oracle_kwargs(inp)
    # request 2 alone (indptrs re-based) gives the same rows
    kw1 = dict(
        kw,
        q_extend=kw["q_extend"][6:9],
        k_extend=kw["k_extend"][6:9],
        v_extend=kw["v_extend"][6:9],
        qo_indptr=torch.tensor([0, 3]),
        kv_indptr=torch.tensor([0, 11]),
        kv_indices=kw["kv_indices"][9:20],
        custom_mask=kw["custom_mask"][int(kw["mask_indptr"][2]) :],
        mask_indptr=torch.tensor([0, 3 * 14]),
    )
    assert torch.allclose(full[6:9], mla_verify_ref(**kw1), rtol=1e-12, atol=1e-14)


def test_prefix_columns_of_the_full_mask_are_never_read():
    inp = small(seed=7)
    base = mla_verify_ref(**oracle_kwargs(inp))
    flipped = inp["custom_mask"].clone()
    qo, kv = inp["qo_indptr"].tolist(), inp["kv_indptr"].tolist()
    for b in range(3):
        L, n, start = kv[b + 1] - kv[b], qo[b + 1] - qo[b], int(inp["mask_indptr"][b])
        for i in range(n):
            row = start + i * (L + n)
            flipped[row : row + L] = 1 - flipped[row : row + L]
    assert torch.equal(base, mla_verify_ref(**dict(oracle_kwargs(inp), custom_mask=flipped)))


def test_draft_columns_of_the_mask_are_read():
    inp = small(prefix=(4,), drafts=(3,), heads=1, tree="chain", seed=8)
    base = mla_verify_ref(**oracle_kwargs(inp))
    m = inp["custom_mask"].clone()
    m[2 * (4 + 3) + 4 + 0] = 0  # row 2 no longer sees draft token 0
    changed = mla_verify_ref(**dict(oracle_kwargs(inp), custom_mask=m))
    assert torch.equal(changed[:2], base[:2]) and not torch.allclose(changed[2], base[2])


def test_nan_in_unused_slots_does_not_reach_the_output():
    inp = small(seed=9, poison=True)
    clean = small(seed=9, poison=False)  # the same case, the unused slots left as random rows
    assert torch.isnan(inp["k_buffer"]).any(), "the pool has poisoned slots"
    assert torch.equal(inp["kv_indices"], clean["kv_indices"])
    assert torch.equal(mla_verify_ref(**oracle_kwargs(inp)), mla_verify_ref(**oracle_kwargs(clean)))


@pytest.mark.parametrize("tree,expect", [("causal", "tril"), ("full", "ones")])
def test_no_mask_modes_follow_is_causal(tree, expect):
    inp = small(prefix=(3,), drafts=(4,), heads=1, tree=tree, seed=10)
    assert inp["custom_mask"] is None
    vis = draft_visibility(None, None, 0, 3, 4, inp["is_causal"])
    want = torch.tril(torch.ones(4, 4, dtype=torch.bool)) if expect == "tril" else torch.ones(4, 4, dtype=torch.bool)
    assert torch.equal(vis, want)
    assert torch.allclose(mla_verify_ref(**oracle_kwargs(inp)), brute_force(inp), rtol=1e-10, atol=1e-12)


def test_random_trees_branch_and_every_row_sees_itself_and_its_ancestors():
    g = torch.Generator().manual_seed(0)
    parents = tree_parents(16, "tree", g)
    assert all(p < i for i, p in enumerate(parents)), "parents precede children (topological order)"
    assert len(set(parents)) < len(parents), "some node has two children (topk > 1)"
    vis = tree_visibility(parents)
    for i, p in enumerate(parents):
        assert vis[i, i]
        if p >= 0:
            assert torch.equal(vis[i] & ~torch.eye(16, dtype=torch.bool)[i], vis[p]), (
                "ancestors of i = p and its ancestors"
            )


def test_oracle_default_scale_is_576_to_the_minus_half():
    inp = small(seed=11)
    kw = oracle_kwargs(inp)
    a = mla_verify_ref(**dict(kw, sm_scale=None))
    b = mla_verify_ref(**dict(kw, sm_scale=576**-0.5))
    assert torch.equal(a, b)
