"""Defrag on a CUDA device: the single-pass Triton relocation and the torch path both preserve
every live token (skipped with the reason on machines without CUDA)."""

from __future__ import annotations

import pytest
import torch

from kv_defrag.validate import run_validate

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device (torch.cuda.is_available() is False)"),
]


@pytest.mark.parametrize("backend, kind", [("triton", "rows"), ("triton", "segments"), ("torch", "rows")])
@pytest.mark.parametrize("dtype, min_run", [("bf16", None), ("fp8", 64)])
def test_validate_on_cuda(backend, kind, dtype, min_run):
    doc = run_validate(1 << 16, 4, dtype, "cuda", min_run, 0, backend=backend, kernel_kind=kind)
    assert doc["config"]["backend"] == backend
    assert doc["ok"] and doc["summary"]["lost_tokens"] == 0 and doc["summary"]["tokens_moved"] > 0
