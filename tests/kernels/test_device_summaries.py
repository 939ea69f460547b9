"""tests/device/dsa_ab.py, the summary lines of a DSA device call's A/B across source trees: per shape and cache,
each tree's CUPTI spans over the rounds and the ratio of its mean to the first tree's; a failed row says so."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support.paths import REPO

DSA_AB = REPO / "tests" / "device" / "dsa_ab.py"


def _row(kv: str, **extra) -> dict:
    return {"B": 1, "L": 32768, "n": 4, "H": 8, "kv": kv, "config": "m16", "splits": 32, **extra}


def _summary(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(DSA_AB), *map(str, args)], capture_output=True, text=True, timeout=60)


def test_bench_summary_gives_each_trees_spans_and_its_ratio_to_the_first(tmp_path):
    spans = {"base": (10.0e-6, 10.2e-6), "bfp": (9.5e-6, 9.7e-6)}
    for tree, per_round in spans.items():
        for i, s in enumerate(per_round, 1):
            rows = [_row("bf16", ours_s=s), _row("fp8", ours_error="RuntimeError: no kernel")]
            (tmp_path / f"bench_{tree}_{i}.json").write_text(json.dumps({"rows": rows}))
    proc = _summary("bench", tmp_path, 2, "base", "bfp")
    assert proc.returncode == 0
    lines = proc.stdout.splitlines()
    ab = [x for x in lines if x.startswith("ab ")]
    assert ab == ["ab (1, 32768, 4, 8, 'bf16') m16 S=32 base 10.00 10.20 | bfp 9.50 9.70 x0.9505"]
    assert sum(x.startswith("error ") and "'fp8'" in x for x in lines) == 4


def test_bench_summary_names_a_tree_whose_documents_are_missing(tmp_path):
    (tmp_path / "bench_base_1.json").write_text(json.dumps({"rows": [_row("bf16", ours_s=1e-5)]}))
    proc = _summary("bench", tmp_path, 1, "base", "bfp")
    assert "unreadable" in proc.stdout and "bench_bfp_1.json" in proc.stdout
    assert proc.stdout.splitlines()[-1].endswith("base 10.00 | bfp -")


def test_parity_summary_lists_each_failed_entry(tmp_path):
    doc = {
        "summary": {"total": 2, "passed": 1},
        "cases": [
            {"ok": True, "case": "a"},
            {"ok": False, "case": "b", "config": "m16", "error": "rel_fro", "rel_fro": 0.2},
        ],
    }
    (tmp_path / "p.json").write_text(json.dumps(doc))
    out = _summary("parity", tmp_path / "p.json").stdout.splitlines()
    assert out[0] == "parity {'total': 2, 'passed': 1}" and out[1].startswith("FAIL b m16 rel_fro {'rel_fro': 0.2,")
    doc["sglang_triton"] = {"ran": True}
    (tmp_path / "p.json").write_text(json.dumps(doc))
    assert _summary("parity", tmp_path / "p.json").stdout.splitlines()[0].endswith("sglang_triton: {'ran': True}")


def test_alt_summary_pairs_ours_with_the_alternative_of_the_same_run(tmp_path):
    rows = [
        _row("bf16", ours_s=10e-6, alt={"config": "n8", "splits": 8, "s": 9e-6}),
        _row("fp8", ours_s=12e-6, alt={"config": "n8", "error": "ValueError: num_splits"}),
        _row("fp8", ours_s=12e-6, alt={"config": "n8x", "skipped": "no fp8 kernel"}),
    ]
    (tmp_path / "a.json").write_text(json.dumps({"rows": rows}))
    out = _summary("alt", tmp_path / "a.json").stdout.splitlines()
    assert out[0] == "alt (1, 32768, 4, 8, 'bf16') m16 S=32 10.00 | n8 S=8 9.00 x0.9000"
    assert out[1] == "alt (1, 32768, 4, 8, 'fp8') no pair: ValueError: num_splits"
    assert out[2] == "alt (1, 32768, 4, 8, 'fp8') no pair: no fp8 kernel"


def test_unknown_usage_exits_2():
    assert _summary("nope").returncode == 2
