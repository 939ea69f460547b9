"""GPU tests of the DSA verify kernel (skipped with the reason on CPU-only machines): the quick
parity suite (oracle, token exactness, determinism, graph replay) for every config built for
the device, and the binding's smem bytes against tiles.py."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.gpu


def test_binding_smem_matches_tiles(cuda_device):
    from dsa_verify import tiles
    from dsa_verify._build import load
    from dsa_verify.api import device_info

    arch, _ = device_info(cuda_device)
    mod = load(arch)
    for c in tiles.ARCH_CONFIGS[arch]:
        assert mod.config_compiled(c.index)
        for fp8 in (False, True):  # 0 for the kind a config has no kernel for (bf16 of n8r)
            assert mod.config_smem_bytes(c.index, fp8) == c.smem_bytes(fp8), (c.name, fp8)


def test_quick_parity_passes(cuda_device, capsys):
    from verify_tools import dsa_parity

    code = dsa_parity.main(["--quick", "--json", "--no-peer"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0, [c for c in doc["cases"] if not c["ok"]]
    assert doc["summary"]["failed"] == 0 and doc["summary"]["total"] > 0


def test_prebuilt_library_builds_and_loads(cuda_device, tmp_path, monkeypatch):
    from dsa_verify import _build
    from dsa_verify.api import device_info

    arch, _ = device_info(cuda_device)
    monkeypatch.setenv("MLA_VERIFY_BUILD_DIR", str(tmp_path))
    doc = _build.build_prebuilt(arch)
    assert doc["ok"], doc.get("log_tail")
    monkeypatch.setenv("MLA_VERIFY_PREBUILT_ONLY", "1")
    mod = _build.load_prebuilt(arch)
    assert callable(mod.fwd) and mod.config_compiled(0)


@pytest.mark.parametrize("kv", ["bf16", "fp8"])
def test_w64_output_rows_staged_or_stored_directly_are_the_same(cuda_device, kv):
    """w64's S = 1 epilogue stages its rows through shared memory when o's rows are 16-byte aligned,
    and stores them directly otherwise (a T stride api.validate allows because T = 1): same bits."""
    import torch

    from dsa_verify.api import device_info, dsa_verify_fwd
    from dsa_verify.inputs import DsaCase, make_inputs

    if device_info(cuda_device)[0] != "sm_90a":
        pytest.skip("w64 is built for sm_90a only")
    H = 64
    d = make_inputs(DsaCase("w64_epilogue", (3000,), 1, H, kv=kv, seed=5), cuda_device)
    args = (d["q_all"], d["kv_cache"], d["page_table_1"], d["seq_lens"], d["sm_scale"])
    staged = dsa_verify_fwd(*args, num_splits=1, tile_config="w64")
    buf = torch.full((H * 512 + 8,), float("nan"), dtype=torch.bfloat16, device=cuda_device)
    odd = torch.as_strided(buf, (1, H, 512), (H * 512 + 4, 512, 1))  # T stride: 8 bytes past 16-byte rows
    direct = dsa_verify_fwd(*args, num_splits=1, tile_config="w64", out=odd)
    assert torch.isfinite(staged).all()
    assert torch.equal(staged.view(torch.int16), direct.view(torch.int16))
