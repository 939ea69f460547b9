"""The plugin's GPU check of the live defrag hook (``sglang_verify_plugin.defrag_gpu_check``) in
its CPU smoke mode, on real sglang 0.5.23 structures: the tool that produces the H200 numbers of
docs/kernels/kv-defrag-results.md must keep running between GPU runs (an unused-import autofix
once broke it without any test noticing)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support.paths import KERNELS, REPO

pytestmark = pytest.mark.sglang

SHIM = REPO / "tests" / "integration" / "with_sgl_kernel_shim.py"


def test_cpu_smoke_defragments_a_churned_pool_and_loses_no_token(sglang_ready):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(KERNELS), os.environ.get("PYTHONPATH")])))
    argv = [sys.executable, str(SHIM), "sglang_verify_plugin.defrag_gpu_check", "--json", "--device", "cpu"]
    proc = subprocess.run(
        [*argv, "--slots", "4000", "--layers", "1"],
        cwd=KERNELS,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    doc = json.loads(proc.stdout)
    assert proc.returncode == 0 and doc["ok"] is True, (doc.get("error"), proc.stderr[-800:])
    assert doc["lost_tokens"] == 0 and doc["consistent"] is True
    assert doc["runs_per_request_after"] < doc["runs_per_request_before"] / 4, doc
