"""Specification of the defrag executor and end-to-end validation on CPU tensors.

- every live token's bytes are identical afterwards in every layer (bf16 and fp8-as-uint8),
  for stacked buffers and for SGLang's list of per-layer buffers;
- req_to_token is remapped only at live positions; the free list is the plan's;
- the single-pass Triton copy kernel gives the same result (Triton interpreter on CPU);
- the validation really detects a lost token (a corrupted run fails it).
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kv_defrag.executor import execute
from kv_defrag.planner import apply_plan, plan_defrag
from kv_defrag.pool import PoolError, make_kv_buffers
from kv_defrag.validate import check_index, count_bad_slots, fill_pattern, run_validate
from kv_defrag.workload import ChurnConfig, simulate_churn
from tests.support.paths import KERNELS  # noqa: E402


def lost_after(pool, plan, kv, rtt):
    idx = check_index(pool, rtt, plan.free_after)
    s0, s1, bad_idx = idx.pop("_pairs")
    uniq, first = np.unique(s0, return_index=True)
    bad = count_bad_slots(kv, uniq, s1[first])
    return int(bad.sum()) + int(bad_idx.sum()), idx


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(64, 1500),
    seed=st.integers(0, 1000),
    dtype=st.sampled_from([torch.bfloat16, torch.uint8]),
    min_run=st.sampled_from([None, 4, 32]),
    share=st.sampled_from([0.0, 0.5]),
)
def test_execute_preserves_every_live_token_in_every_layer(n, seed, dtype, min_run, share):
    pool = simulate_churn(ChurnConfig(n, seed=seed, share_frac=share))
    plan = plan_defrag(pool, min_run=min_run)
    kv = make_kv_buffers(n, 3, dtype)
    fill_pattern(kv)
    rtt = torch.as_tensor(pool.req_to_token.copy())
    res = execute(plan, kv, req_to_token=rtt, seq_lens=pool.seq_lens, backend="torch")
    lost, idx = lost_after(pool, plan, kv, rtt.numpy())
    assert lost == 0 and idx["consistent"], idx
    assert np.array_equal(rtt.numpy(), apply_plan(pool, plan).req_to_token)
    assert np.array_equal(res.free_slots, plan.free_after)
    assert res.bytes_moved == plan.tokens_moved * 3 * 576 * kv.element_size()


def test_positions_past_seq_len_are_left_alone():
    pool = simulate_churn(ChurnConfig(512, seed=3))
    rtt = pool.req_to_token.copy()
    live = np.arange(rtt.shape[1])[None, :] < pool.seq_lens[:, None]
    rtt[~live] = 7  # stale entries
    plan = plan_defrag(pool)
    assert plan.tokens_moved > 0
    t = torch.as_tensor(rtt.copy())
    execute(plan, make_kv_buffers(512, 1, torch.uint8), req_to_token=t, seq_lens=pool.seq_lens)
    assert (t.numpy()[~live] == 7).all()
    assert np.array_equal(t.numpy()[live], plan.remap[rtt[live]])


def test_list_of_per_layer_buffers_matches_stacked():
    pool = simulate_churn(ChurnConfig(700, seed=5))
    plan = plan_defrag(pool, min_run=8)
    stacked = make_kv_buffers(700, 2, torch.bfloat16)
    fill_pattern(stacked)
    layers = [stacked[i].clone() for i in range(2)]
    execute(plan, stacked, backend="torch")
    res = execute(plan, layers, backend="torch")
    assert res.launches == 2 * plan.copy_steps  # one launch per layer chunk and step, never per token
    for i in range(2):
        assert torch.equal(layers[i].view(torch.int16), stacked[i].view(torch.int16))  # bitwise (NaN patterns)


def test_layer_chunks_give_the_same_bytes():
    pool = simulate_churn(ChurnConfig(600, seed=9))
    plan = plan_defrag(pool)
    a = make_kv_buffers(600, 5, torch.uint8)
    fill_pattern(a)
    b = a.clone()
    execute(plan, a)
    res = execute(plan, b, layers_per_launch=2)
    assert torch.equal(a, b) and res.launches == 3 * plan.copy_steps


def test_a_corrupted_relocation_is_detected():
    pool = simulate_churn(ChurnConfig(800, seed=2))
    plan = plan_defrag(pool)
    kv = make_kv_buffers(800, 2, torch.bfloat16)
    fill_pattern(kv)
    rtt = torch.as_tensor(pool.req_to_token.copy())
    execute(plan, kv, req_to_token=rtt, seq_lens=pool.seq_lens)
    victim = int(plan.remap[pool.live_slots()[0]])
    kv[1, victim, 0, 5] += 1  # one element of one token in one layer
    lost, idx = lost_after(pool, plan, kv, rtt.numpy())
    assert lost >= 1 and idx["consistent"]
    rtt2 = rtt.numpy().copy()
    r = int(pool.live_requests()[0])
    rtt2[r, 0] = rtt2[r, 1]  # two positions now claim one slot
    assert not check_index(pool, rtt2, plan.free_after)["consistent"]


@pytest.mark.parametrize(
    "kv, field",
    [
        (lambda n: torch.zeros((2, n + 1, 1, 512), dtype=torch.bfloat16), "kv"),
        (lambda n: torch.zeros((2, n + 2, 1, 576), dtype=torch.bfloat16), "kv"),
        (lambda n: torch.zeros((2, n + 1, 1, 576), dtype=torch.float32), "kv"),
        (lambda n: [torch.zeros((n + 1, 576), dtype=torch.bfloat16)], "kv[0]"),
    ],
)
def test_bad_buffers_are_rejected_naming_the_field(kv, field):
    pool = simulate_churn(ChurnConfig(128, seed=1))
    plan = plan_defrag(pool)
    buf = kv(128)
    before = buf.clone() if isinstance(buf, torch.Tensor) else None
    with pytest.raises(PoolError, match=f"^{field.replace('[', '.').replace(']', '.')}:"):
        execute(plan, buf)
    if before is not None:
        assert torch.equal(buf, before)


def test_run_validate_reports_the_summary_fields():
    doc = run_validate(2048, 2, "fp8", "cpu", None, 4)
    s = doc["summary"]
    assert doc["ok"] and s["lost_tokens"] == 0 and s["consistent"] is True
    assert s["tokens_moved"] > 0 and s["bytes_moved"] == s["tokens_moved"] * 2 * 576
    assert s["frag_after"]["runs_per_request"] < s["frag_before"]["runs_per_request"]
    assert s["planner_ms"] > 0 and (s["slots"], s["layers"]) == (2048, 2)


def test_triton_single_pass_kernel_in_interpreter():
    """Both CUDA copy kernels, run by Triton's CPU interpreter (bf16 and uint8). The plan keeps
    at most 3 dependency levels (the interpreter pays per launch); the rest goes through staging."""
    pytest.importorskip("triton", reason="triton not installed")
    code = (
        "import torch\n"
        "from kv_defrag.executor import execute\n"
        "from kv_defrag.planner import plan_defrag, apply_plan\n"
        "from kv_defrag.pool import make_kv_buffers\n"
        "from kv_defrag.validate import check_index, count_bad_slots, fill_pattern\n"
        "from kv_defrag.workload import ChurnConfig, simulate_churn\n"
        "import numpy as np\n"
        "pool = simulate_churn(ChurnConfig(600, seed=1))\n"
        "plan = plan_defrag(pool, max_levels=2)\n"
        "assert plan.tokens_moved > 0 and plan.copy_steps <= 12, plan.copy_steps\n"
        "for dt, kind, bm in ((torch.bfloat16, 'rows', 16), (torch.uint8, 'rows', 16),\n"
        "                     (torch.bfloat16, 'segments', 128), (torch.uint8, 'segments', 128)):\n"
        "    kv = make_kv_buffers(600, 2, dt)\n"
        "    fill_pattern(kv)\n"
        "    rtt = torch.as_tensor(pool.req_to_token.copy())\n"
        "    res = execute(plan, kv, rtt, pool.seq_lens, backend='triton', kernel_kind=kind, block_m=bm)\n"
        "    assert res.backend == 'triton' and res.note is None\n"
        "    idx = check_index(pool, rtt.numpy(), res.free_slots)\n"
        "    s0, s1, bad = idx.pop('_pairs')\n"
        "    u, first = np.unique(s0, return_index=True)\n"
        "    assert idx['consistent'] and not bad.any() and not count_bad_slots(kv, u, s1[first]).any()\n"
        "print('ok')\n"
    )
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(KERNELS))
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=str(KERNELS), env=env, capture_output=True, text=True, timeout=240
    )
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_bench_verify_inputs_and_torch_fallback_match_the_oracle_on_both_layouts():
    """The bench's fragmented and defragmented verify calls compute the same attention, and the
    torch fallback agrees with mla_verify.reference on the SGLang argument layout the bench builds."""
    from kv_defrag.bench import _verify_inputs, torch_verify
    from mla_verify.reference import mla_verify_ref

    pool = simulate_churn(ChurnConfig(1500, seed=4))
    plan = plan_defrag(pool)
    after = apply_plan(pool, plan)
    rows = pool.live_requests()[:3]
    g = torch.Generator().manual_seed(0)
    kb = torch.zeros((1501, 1, 576), dtype=torch.bfloat16)
    live = torch.as_tensor(pool.live_slots())
    kb[live] = (torch.randn((live.numel(), 1, 576), generator=g) * 0.5).to(torch.bfloat16)
    kb_after = torch.zeros_like(kb)
    kb_after[torch.as_tensor(plan.remap)[live]] = kb[live]
    outs = []
    for rtt, buf in ((pool.req_to_token, kb), (after.req_to_token, kb_after)):
        a = _verify_inputs(rtt, pool.seq_lens, rows, 4, 2, 0, dev="cpu")
        torch_verify(a, buf)
        ref = mla_verify_ref(
            a["q"],
            a["k_ext"],
            a["v_ext"],
            buf,
            buf[..., :512],
            a["qo_indptr"],
            a["kv_indptr"],
            a["kv_indices"],
            a["mask"],
            True,
            a["mask_indptr"],
            sm_scale=a["sm_scale"],
        )
        assert (a["o"].double() - ref).abs().max() < 0.05
        outs.append(a["o"])
    assert torch.equal(outs[0], outs[1])


def test_bench_pipeline_runs_end_to_end_on_cpu(monkeypatch):
    """Smoke test of every bench section on CPU (the CLI refuses --bench without CUDA; the numbers
    here mean nothing, the document shape and the fallbacks do)."""
    from kv_defrag import bench
    from kv_defrag.bench import run_bench

    monkeypatch.setattr(bench, "_sglang_verify", lambda: (None, "not imported in this test (slow import)"))

    d = run_bench(2048, 1, "bf16", None, 0, "torch", [500], 2, 2, 2, 2, device="cpu")
    s = d["summary"]
    assert d["ok"] and d["errors"] == {}
    assert s["verify_impl"] == "torch-gather" and "bundled_fallback_reason" in d["verify"]
    assert d["verify"]["torch-gather"]["max_abs_diff_frag_vs_defrag"] == 0.0
    assert s["gain_pct"] == pytest.approx((s["t_frag_us"] - s["t_defrag_us"]) / s["t_frag_us"] * 100, abs=1e-2)
    assert s["relocation_backend"] == "torch" and s["relocation_bw_ratio"] > 0 and s["copy_bw_gbs"] > 0
    assert list(s["planner_ms_by_slots"]) == ["500"]
    assert d["verify"]["sglang_skipped"].startswith("not imported")


@pytest.mark.parametrize(
    "bad, field", [("rtt_int64", "req_to_token"), ("lens_short", "seq_lens"), ("lens_long", "seq_lens")]
)
def test_bad_index_arguments_are_rejected_before_any_copy(bad, field):
    pool = simulate_churn(ChurnConfig(256, seed=1))
    plan = plan_defrag(pool)
    assert plan.tokens_moved > 0
    kv = make_kv_buffers(256, 1, torch.uint8)
    fill_pattern(kv)
    before = kv.clone()
    rtt = torch.as_tensor(pool.req_to_token.copy())
    lens = pool.seq_lens.copy()
    if bad == "rtt_int64":
        rtt = rtt.long()
    elif bad == "lens_short":
        lens = lens[:-1]
    else:
        lens[1] = rtt.shape[1] + 1
    with pytest.raises(PoolError, match=f"^{field}:"):
        execute(plan, kv, req_to_token=rtt, seq_lens=lens)
    assert torch.equal(kv, before)
