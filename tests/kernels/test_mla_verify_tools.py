"""The phase-1/2 tools print one JSON document; without a CUDA device they say `blocked` and
exit 75 (never a pass); the parity suite holds the cases the issue asks for."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.paths import KERNELS, REPO  # noqa: E402
from verify_tools import parity
from verify_tools.bench import ANCHORS, EXTRA, SWEEP, shape_bytes_flops

torch = pytest.importorskip("torch")


def run_tool(*args):
    proc = subprocess.run([sys.executable, "-m", *args], cwd=str(KERNELS), capture_output=True, text=True, timeout=300)
    return proc.returncode, proc.stdout, proc.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="this host has CUDA: the blocked path does not apply")
@pytest.mark.parametrize(
    "tool,keys",
    [
        ("verify_tools.parity", ("cases_total", "cases_failed", "max_rel_err", "token_mismatches", "deterministic")),
        ("verify_tools.bench", ("min_speedup_vs_sglang_extend", "min_sol_pct_long_ctx", "geomean_speedup_vs_oracle")),
    ],
)
def test_without_cuda_the_tool_is_blocked_not_passed(tool, keys):
    code, out, _ = run_tool(tool, "--json")
    doc = json.loads(out)
    assert code == 75 and doc["ok"] is False and doc["blocked"].startswith("no CUDA device on host")
    assert all(k in doc["summary"] for k in keys), "gate paths exist even when blocked"


def test_unknown_parity_case_is_a_usage_error():
    code, _, err = run_tool("verify_tools.parity", "--cases", "no_such_case")
    assert code == 2 and "no_such_case" in err


@pytest.mark.parametrize("configs", ["no_such_config", "sm90wg,nope", ","])
def test_unknown_parity_config_is_a_usage_error(configs):
    code, _, err = run_tool("verify_tools.parity", "--configs", configs)
    assert code == 2 and "--configs" in err


def test_parity_cases_cover_the_issue():
    specs = parity.CASES
    assert len({c.name for c in specs}) == len(specs) >= 8
    assert any(max(c.prefix_lens) >= 65536 for c in specs), "the seed's 65k prefix"
    assert {1, 32} <= {c.batch for c in specs}
    assert any(len(set(c.prefix_lens)) > 1 and len(set(c.draft_lens)) > 1 for c in specs), "varlen"
    assert any(0 in c.prefix_lens for c in specs), "prefix 0"
    assert any(1 in c.draft_lens for c in specs) and any(16 in c.draft_lens for c in specs)
    assert {"tree", "chain"} <= {c.tree for c in specs}
    assert {16, 128} <= {c.heads for c in specs}
    assert any(c.shared_prefix for c in specs) and all(c.poison for c in specs)
    assert set(parity.QUICK) <= {c.name for c in specs}


def test_token_check_counts_near_ties_and_mismatches():
    w = torch.eye(512, dtype=torch.float64)[:, :8].repeat(1, 1)  # logits = first 8 dims
    ref = torch.zeros(2, 1, 512, dtype=torch.float64)
    ref[0, 0, :8] = torch.tensor([5.0, 1, 0, 0, 0, 0, 0, 0])  # clear winner 0
    ref[1, 0, :8] = torch.tensor([1.0, 1.0, 0, 0, 0, 0, 0, 0])  # exact tie
    out = ref.clone()
    out[0, 0, 1] = 6.0  # wrong winner on a clear row: a mismatch
    out[1, 0, 1] = 1.01  # flips the tie: excused as a near tie
    r = parity.token_check(out, ref, w)
    assert r == {"rows": 2, "near_ties": 1, "token_mismatches": 1, "mismatches_in_near_ties": 1}


def test_bench_covers_the_anchor_rows_and_the_floor_counts_bytes_and_flops():
    shapes = set(SWEEP + ANCHORS + EXTRA)
    for row in [
        (1, 4096, 8, 16),
        (1, 32768, 8, 16),
        (1, 131072, 8, 16),
        (8, 32768, 8, 16),
        (32, 8192, 8, 16),
        (4, 65536, 4, 64),
    ]:
        assert row in shapes
    assert any(h == 128 for (_, _, _, h) in shapes)
    by, fl = shape_bytes_flops(1, 32768, 8, 16)
    assert by > 32768 * 1152 and fl == 2 * 16 * 8 * (32768 + 8) * 1088


def test_fp8_parity_cases_cover_the_cache_layout():
    fp8 = [c for c in parity.CASES if c.kv_dtype == "fp8"]
    assert any(max(c.prefix_lens) >= 65536 for c in fp8), "the seed shape with an fp8 cache"
    assert any(c.k_scale != c.v_scale for c in fp8), "k_scale and v_scale applied separately"
    assert any(c.k_scale != 1.0 for c in fp8)
    assert any(c.extra.get("uint8_storage") for c in fp8), "MLATokenToKVPool's uint8 storage"
    assert any(c.extra.get("fp8_codes") for c in fp8), "bit-exact dequantization probe"
    assert {"tree", "chain"} <= {c.tree for c in fp8}


def test_fp8_bytes_halve_the_kv_rows_only():
    by16, fl16 = shape_bytes_flops(4, 131072, 4, 16)
    by8, fl8 = shape_bytes_flops(4, 131072, 4, 16, kv_bytes_per_dim=1)
    assert fl8 == fl16 and by16 - by8 == 4 * 131072 * 576


def test_phase2_gate_metrics_exist_in_the_blocked_bench_document():
    import yaml

    from tests.support.paths import REPO
    from verify_tools import bench

    spec = yaml.safe_load((REPO / "phases" / "2-microbench.yaml").read_text())
    summary = bench.blocked_doc("x")["summary"]
    gates = [g["metric"] for s in spec["steps"] for g in s.get("gates", [])]
    assert "summary.max_graph_buffer_ratio" in gates
    assert all(m.split(".", 1)[1] in summary for m in gates)
    assert min(bench.GRAPH_BUFFER_LENS) <= 512 and max(bench.GRAPH_BUFFER_LENS) >= 131072
    assert bench.FP8_MEM_SHAPE in bench.FP8_SHAPES


def test_phase1_gate_metrics_exist_in_the_blocked_parity_document():
    import yaml

    from tests.support.paths import REPO
    from verify_tools import parity

    spec = yaml.safe_load((REPO / "phases" / "1-parity.yaml").read_text())
    summary = parity.blocked_doc("x")["summary"]
    gates = [g["metric"] for s in spec["steps"] for g in s.get("gates", [])]
    assert "summary.graph_replays_failed" in gates
    assert all(m.split(".", 1)[1] in summary for m in gates)


# ---- FlashMLA dense decode peer (bench.flashmla_peer): argument construction and the skip path.
# The peer itself has NOT run on a GPU yet; these check what can be checked on a CPU.


def test_paged_copy_puts_each_token_at_its_block_table_entry():
    from verify_tools.bench import paged_copy

    g = torch.Generator().manual_seed(1)
    kb = torch.randn(400, 1, 576, generator=g).to(torch.bfloat16)
    slots = [torch.randperm(400, generator=g)[:70], torch.randperm(400, generator=g)[:130], torch.tensor([5])]
    cache, table, seqlens = paged_copy(torch, kb, slots, seed=3)
    assert cache.shape == (2 + 3 + 1, 64, 1, 576) and table.dtype == seqlens.dtype == torch.int32
    assert table.shape == (3, 3) and seqlens.tolist() == [70, 130, 1]
    used = torch.cat([table[0, :2], table[1, :3], table[2, :1]])
    assert sorted(used.tolist()) == list(range(6)), "every page used once"
    for b, s in enumerate(slots):
        for t in range(len(s)):
            assert torch.equal(cache[table[b, t // 64], t % 64, 0], kb[s[t], 0])
    assert not cache[table[0, 1], 70 - 64 :].any(), "a last page's tail is zero"


def _fake_flashmla_dense(calls):
    """A stand-in for the flash_mla module (dense decode semantics: paged KV, causal = the last
    s_q keys masked bottom-right) computing in torch, recording its arguments."""
    import types

    class Sched:
        def __init__(self, tile_scheduler_metadata=None, num_splits=None):
            self.tile_scheduler_metadata, self.num_splits = tile_scheduler_metadata, num_splits

    def meta(seqlens, q_tokens_per_hk, h_k, h_q=None, fp8=False, topk=None, use_legacy=False):
        calls.append(("meta", q_tokens_per_hk, h_k, h_q, fp8, topk, use_legacy))
        return torch.zeros(1, 8, dtype=torch.int32), torch.zeros(seqlens.numel() + 1, dtype=torch.int32)

    def decode(q, k_cache, block_table, cache_seqlens, head_dim_v, sched, softmax_scale=None, causal=False, **kw):
        calls.append(("decode", tuple(q.shape), tuple(k_cache.shape), causal, kw))
        B, s_q, H, _ = q.shape
        o = torch.empty(B, s_q, H, head_dim_v)
        for b in range(B):
            n = int(cache_seqlens[b])
            k = k_cache[block_table[b].long()].reshape(-1, k_cache.shape[-1])[:n].float()
            logits = torch.einsum("shd,kd->shk", q[b].float(), k) * softmax_scale
            if causal:
                mask = torch.arange(n)[None, :] > (n - s_q + torch.arange(s_q))[:, None]
                logits = logits.masked_fill(mask[:, None, :], float("-inf"))
            o[b] = torch.einsum("shk,kd->shd", torch.softmax(logits, -1), k[:, :head_dim_v])
        return o.to(q.dtype), None

    iface = types.SimpleNamespace(FlashMLASchedMeta=Sched)
    return types.SimpleNamespace(
        get_mla_decoding_metadata=meta, flash_mla_with_kvcache=decode, flash_mla_interface=iface
    )


class _EagerTimer:
    def time_graph_or_eager(self, fn, *a, **k):
        fn()
        return 1.0, "fake"


def test_flashmla_dense_peer_builds_the_same_problem_as_ours():
    """With a torch stand-in for FlashMLA's dense decode, the peer's paged copy + q layout + causal
    flag reproduce the oracle (chain drafts: draft i sees the context and drafts 0..i)."""
    from mla_verify.inputs import CaseSpec, make_inputs
    from verify_tools.bench import flashmla_peer, oracle_fp32

    B, L, n, H = 2, 100, 3, 4
    inp = make_inputs(CaseSpec("fm", (L,) * B, (n,) * B, H, tree="chain", poison=False, seed=5), "cpu")
    ref = oracle_fp32(inp, B, L, n, H)()
    calls = []
    out = flashmla_peer(
        torch, _EagerTimer(), inp, B, L, n, H, inp["sm_scale"], ref, (_fake_flashmla_dense(calls), None)
    )
    assert "flashmla_skipped" not in out, out
    assert out["rel_err_vs_flashmla"] < 1e-2 and out["flashmla_us"] == 1.0 and "flashmla_disagrees" not in out
    assert calls[0] == ("meta", n * H, 1, None, False, None, True), "SGLang's target-verify metadata call"
    kind, qshape, kshape, causal, kw = calls[1]
    assert qshape == (B, n, H, 576) and kshape[1:] == (64, 1, 576) and causal and kw.get("use_legacy") is True


def test_flashmla_dense_peer_skip_paths_record_a_reason_and_no_number(monkeypatch):
    import sys

    from verify_tools import bench

    monkeypatch.setitem(sys.modules, "flash_mla", None)  # `import flash_mla` raises ImportError
    fm, reason = bench.import_flashmla()
    assert fm is None and reason.startswith("flash_mla not importable")
    out = bench.flashmla_peer(torch, None, {}, 1, 1, 1, 1, 1.0, None, (None, reason))
    assert out == {"flashmla_skipped": reason}
    broken = _fake_flashmla_dense([])
    broken.get_mla_decoding_metadata = lambda *a, **k: (_ for _ in ()).throw(
        RuntimeError("Dense decode MLA is only supported on SM90a")
    )
    from mla_verify.inputs import CaseSpec, make_inputs

    inp = make_inputs(CaseSpec("fm", (64,), (2,), 2, tree="chain", poison=False), "cpu")
    out = bench.flashmla_peer(torch, _EagerTimer(), inp, 1, 64, 2, 2, 0.1, None, (broken, None))
    assert out == {"flashmla_skipped": "RuntimeError: Dense decode MLA is only supported on SM90a"}
    assert not any(k.endswith("_us") for k in out)


def test_fastest_peer_includes_flashmla_unless_it_disagrees():
    from verify_tools.bench import fastest_peer

    row = {"new_us": 10.0, "flashinfer_fa3_us": 12.0, "flashmla_us": 8.0}
    assert fastest_peer(row) == ("flashmla", 0.8)
    assert fastest_peer({**row, "flashmla_disagrees": "rel err"}) == ("flashinfer_fa3", 1.2)
    assert fastest_peer({"new_us": 10.0, "flashmla_skipped": "x"}) == (None, None)


def test_graph_buffer_sides_are_timed_in_alternation_and_each_keeps_its_minimum():
    from verify_tools.bench import GB_ROUNDS, min_interleaved

    calls, times = [], {"graph": iter([10.4, 10.1, 10.6]), "exact": iter([9.9, 9.6, 9.8])}

    def side(name):
        def measure():
            calls.append(name)
            return next(times[name])

        return measure

    best = min_interleaved({"graph": side("graph"), "exact": side("exact")}, 3)
    assert calls == ["graph", "exact"] * 3, "one of each per round, not all of one side first"
    assert best == {"graph": 10.1, "exact": 9.6}
    assert GB_ROUNDS >= 3


@pytest.mark.parametrize(
    "args,what",
    [
        (["--tree-ab", "base=/nowhere", "--ab-configs", ","], "--ab-configs"),
        (["--tree-ab", "base=/nowhere", "--ab-configs", "sm90wg,bogus"], "bogus"),
        (["--tree-ab", "no-equals-sign"], "--tree-ab"),
        (["--tree-ab", ","], "--tree-ab"),
        (["--tree-ab", "base=/nowhere", "--ab-kv", "int4"], "--ab-kv"),
        (["--tree-ab", "base=/nowhere", "--ab-fp8-paths", "bf16,fp16"], "fp16"),
        (["--tree-ab", "base=/nowhere", "--ab-fp8-paths", ","], "--ab-fp8-paths"),
        (["--tree-ab", "base=/nowhere", "--gb-kv", "bf16,int4"], "--gb-kv"),
        (["--gb-kv", ","], "--gb-kv"),
    ],
)
def test_bench_tree_ab_refuses_a_bad_list_before_any_device_work(args, what):
    code, out, err = run_tool("verify_tools.bench", *args)
    assert code == 2 and what in err and out == ""


def test_tree_builds_are_named_by_their_sources_and_flags(tmp_path, monkeypatch):
    """bench --tree-ab and dsa_tree_ab build other csrc/ copies through one helper: the module name and build
    folder carry a digest of the tree's sources, headers and flags, so an edited tree never reuses a stale build."""
    from dsa_verify import _build as dsa_build_mod
    from mla_verify import _build
    from verify_tools import dsa_tree_ab
    from verify_tools.bench import load_tree

    calls = []
    monkeypatch.setattr(_build, "compile_jit", lambda arch, **kw: calls.append(kw) or kw["name"])
    monkeypatch.setattr(_build, "cache_root", lambda: tmp_path / "cache")
    tree = tmp_path / "csrc"
    tree.mkdir()
    for name in _build.SOURCES + _build.HEADERS:
        (tree / name).write_text(f"// {name}\n")
    first = load_tree("sm_90a", str(tree))
    assert load_tree("sm_90a", str(tree)) == first  # same tree, same flags: same build
    (tree / _build.HEADERS[0]).write_text("// edited\n")
    edited = load_tree("sm_90a", str(tree))
    assert edited != first and edited.startswith("mla_verify_sm_90a_") and edited.endswith("_tree")
    kw = calls[-1]
    assert kw["csrc"] == tree.resolve() and kw["sources"] == _build.SOURCES and kw["extra"] == []
    assert kw["build_dir"].parent == tmp_path / "cache" and kw["build_dir"].name.startswith("mla_verify-tree-")
    dsa = dsa_tree_ab.load_tree("sm_90a", str(tree))
    assert dsa.startswith("dsa_verify_sm_90a_")
    assert calls[-1]["extra"] == [dsa_build_mod.EXPERIMENTAL_FLAG] and calls[-1]["sources"] == dsa_build_mod.SOURCES


def test_bench_summary_gives_the_fp8_ratio_of_a_graph_replay_and_of_an_eager_call():
    """fp8_over_bf16_mem_shape is the replayed auto call's (captured: the bf16 decode); the eager ratio takes the
    time of the arithmetic an eager auto call ran (fp8_eager_path) on the memory-floored shape, None without it; the
    gated one is the replay with the opt-in fp8_graph_gate."""
    from verify_tools import bench

    mem = dict(zip("BLnH", bench.FP8_MEM_SHAPE))
    row = {**mem, "new_us": 200.0, "fp8_over_bf16": 1.2, "fp8_paths_us": {"bf16": 240.0, "f16": 190.0}}
    row["fp8_graph_gate_over_bf16"] = 0.97
    other = {"B": 1, "L": 4096, "n": 8, "H": 16, "new_us": 20.0, "fp8_over_bf16": 1.1}
    s = bench.summarize([other, {**row, "fp8_eager_path": "f16"}], (4e12, 7e14))
    assert s["fp8_over_bf16_mem_shape"] == 1.2 and s["fp8_eager_over_bf16_mem_shape"] == 0.95
    assert s["fp8_graph_gate_over_bf16_mem_shape"] == 0.97
    s = bench.summarize([other, {**row, "fp8_eager_path": None}], (4e12, 7e14))
    assert s["fp8_eager_over_bf16_mem_shape"] is None
    assert bench.summarize([other], (4e12, 7e14))["fp8_over_bf16_mem_shape"] is None


def test_bench_summary_gives_the_slowest_draft_tree_against_its_chain():
    """max_tree_over_chain is the worst tree / chain time ratio of the rows that timed a tree (TREE_SHAPES, each a
    shape the bench's grid runs), None when no row did."""
    from verify_tools import bench

    grid = set(bench.SWEEP) | set(bench.ANCHORS) | set(bench.EXTRA)
    assert bench.TREE_SHAPES and set(bench.TREE_SHAPES) <= grid
    rows = [
        {"B": 1, "L": 4096, "n": 8, "H": 16, "new_us": 20.0, "tree_over_chain": 1.01},
        {"B": 8, "L": 32768, "n": 8, "H": 16, "new_us": 160.0, "tree_over_chain": 1.04},
        {"B": 4, "L": 65536, "n": 4, "H": 64, "new_us": 280.0},
    ]
    assert bench.summarize(rows, (4e12, 7e14))["max_tree_over_chain"] == 1.04
    assert bench.summarize(rows[2:], (4e12, 7e14))["max_tree_over_chain"] is None


def test_ab_summary_prints_a_recorded_tree_ab_document_without_a_device(tmp_path):
    """bench --ab-summary FILE: the per-row lines device scripts print after an A/B call, from a document
    recorded on the H200 (session 30, call 6), on a machine with no GPU."""
    recorded = REPO / "docs/results/ab_combine_prefetch_bf16_h200_session30_call6.json"
    doc = json.loads(recorded.read_text(encoding="utf-8"))
    code, out, err = run_tool("verify_tools.bench", "--ab-summary", str(recorded))
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) == len(doc["ab"]) + len(doc["graph_buffer"]) + len(doc["cupti"])
    first = doc["ab"][0]
    assert lines[0].startswith(f"B={first['B']} L={first['L']} n={first['n']} H={first['H']}: us ")
    assert "over base" in lines[0] and "bitwise" in lines[0]
    broken = tmp_path / "broken.json"
    broken.write_text('{"ab": [{"B": 1}]}', encoding="utf-8")
    code, out, err = run_tool("verify_tools.bench", "--ab-summary", str(broken))
    assert code == 2 and "broken.json" in err and out == ""


class _TreeFwd:
    """A tree module's binding as bench._ArgsFit sees it: pybind11's fwd signature line, the calls it got."""

    def __init__(self, nargs: int, gated: bool):
        self.calls: list = []
        sig = ", ".join(f"arg{i}: int" for i in range(nargs))
        self.fwd = lambda *a: self.calls.append(a)
        self.fwd.__doc__ = f"fwd({sig}) -> None\n"
        if gated:
            self.config_fp8_ws_min_tokens = lambda cfg: 2048


def test_fwd_nargs_is_the_bindings_fwd_parameter_count():
    """bench.FWD_NARGS (where _ArgsFit finds fp8_f16) counts the C++ fwd's parameters, fp8_f16 the last."""
    import re

    from verify_tools.bench import FWD_NARGS

    src = (KERNELS / "mla_verify" / "csrc" / "binding.cpp").read_text()
    params = re.search(r"\nvoid fwd\((.*?)\)\s*\{", src, re.S).group(1).split(",")
    assert len(params) == FWD_NARGS and params[-1].split()[-1] == "fp8_f16"


@pytest.mark.parametrize(
    ("nargs", "gated", "sent", "got"),
    [
        (26, False, 3, 0),  # built before the gated graph launches: a capture of "auto" ran the bf16 decode
        (26, False, 4, 2),  # and one of "f16" the warp-specialized kernel (its capture chunk reaches the threshold)
        (26, False, 1, 1),
        (26, True, 3, 3),  # a tree that has them gets the checkout's flag
        (25, False, 3, None),  # built before fp8_f16 existed: the flag is dropped
    ],
)
def test_tree_ab_runs_an_older_tree_with_the_flags_it_was_built_for(nargs, gated, sent, got):
    from verify_tools.bench import FWD_NARGS, _ArgsFit

    mod = _TreeFwd(nargs, gated)
    _ArgsFit(mod).fwd(*range(FWD_NARGS - 1), sent)
    assert len(mod.calls[0]) == nargs and (got is None or mod.calls[0][-1] == got)
