"""``python -m kv_defrag`` follows the kernel tool contract (plans/0001 section 2):
one JSON document with ``ok`` and ``summary.*``; exit 0 ok, 2 usage, 75 blocked without CUDA."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from tests.support.paths import KERNELS  # noqa: E402


def run(*args: str):
    env = dict(os.environ, PYTHONPATH=str(KERNELS))
    return subprocess.run(
        [sys.executable, "-m", "kv_defrag", *args],
        cwd=str(KERNELS),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_validate_json_on_a_small_cpu_pool():
    out = run("--validate", "--json", "--slots", "3000", "--layers", "2", "--device", "cpu", "--min-run", "16")
    assert out.returncode == 0, out.stderr[-2000:]
    doc = json.loads(out.stdout)  # exactly one document on stdout
    s = doc["summary"]
    assert doc["ok"] is True and s["lost_tokens"] == 0 and s["consistent"] is True
    for key in ("tokens_moved", "bytes_moved", "frag_before", "frag_after", "planner_ms", "slots", "layers"):
        assert key in s, key
    assert (s["slots"], s["layers"]) == (3000, 2)
    assert s["frag_after"]["frac_tokens_in_good_runs"] > s["frag_before"]["frac_tokens_in_good_runs"]
    assert "[defrag]" in out.stderr  # progress goes to stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA path; this machine has CUDA")
def test_bench_without_cuda_is_blocked_with_exit_75():
    out = run("--bench", "--json")
    assert out.returncode == 75
    doc = json.loads(out.stdout)
    assert doc["ok"] is False and "CUDA" in doc["blocked"]


@pytest.mark.parametrize(
    "args, field",
    [(("--slots", "0"), "--slots"), (("--min-run", "0"), "--min-run"), (("--planner-sizes", "1k"), "--planner-sizes")],
)
def test_bad_option_is_a_usage_error_naming_it(args, field):
    out = run("--validate", "--json", *args)
    assert out.returncode == 2
    assert json.loads(out.stdout)["ok"] is False
    assert out.stderr.strip().splitlines()[-1].startswith(f"error: {field}:")


def test_a_mode_is_required():
    assert run("--json").returncode == 2
