"""Phase 0's build check: a real nvcc build for sm_120a and sm_90a with 0 spill bytes and shared
memory within each arch's per-block limit; the ptxas parser reads spills, registers and smem."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mla_verify import tiles
from tests.support.paths import KERNELS
from tests.support.tools import run_tool
from verify_tools.build_check import dynamic_smem, parse_ptxas

SAMPLE = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_ZN4mlav23mla_verify_split_kernelILi64ELi64ELi2EEEvNS_6ParamsE' for 'sm_90a'
ptxas info    : Function properties for _ZN4mlav23mla_verify_split_kernelILi64ELi64ELi2EEEvNS_6ParamsE
    96 bytes stack frame, 96 bytes spill stores, 172 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 96 bytes cumulative stack size
ptxas info    : Compiling entry function '_ZN4mlav25mla_verify_combine_kernelENS_6ParamsE' for 'sm_90a'
ptxas info    : Function properties for _ZN4mlav25mla_verify_combine_kernelENS_6ParamsE
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 44 registers, used 1 barriers, 4096 bytes smem, 920 bytes cmem[0]
"""


def test_ptxas_parser_reads_spills_registers_and_static_smem():
    ks = parse_ptxas(SAMPLE)
    assert [k["registers"] for k in ks] == [255, 44]
    assert (ks[0]["spill_store_bytes"], ks[0]["spill_load_bytes"], ks[0]["stack_bytes"]) == (96, 172, 96)
    assert ks[1]["static_smem_bytes"] == 4096 and ks[1]["spill_store_bytes"] == 0


# sm_120a style: the split kernel calls a non-inlined device function, whose properties ptxas prints
# after the entry's own lines (nvcc 13.0; a parser that kept the last properties line read 0 spills here)
SAMPLE_CALLEE = """ptxas info    : Compiling entry function '_ZN4mlav23mla_verify_split_kernelILi32ELi16ELi3ELb1EEEvNS_6ParamsE' for 'sm_120a'
ptxas info    : Function properties for _ZN4mlav23mla_verify_split_kernelILi32ELi16ELi3ELb1EEEvNS_6ParamsE
    8 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 8 bytes cumulative stack size
ptxas info    : Compile time = 258.632 ms
ptxas info    : Function properties for _ZN4mlav22effective_splits_splitERKNS_6ParamsEll
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compiling entry function '_ZN4mlav25mla_verify_combine_kernelILi8EEEvNS_6ParamsE' for 'sm_120a'
ptxas info    : Function properties for _ZN4mlav25mla_verify_combine_kernelILi8EEEvNS_6ParamsE
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 52 registers, used 1 barriers, 4224 bytes smem
ptxas info    : Function properties for _ZN4mlav11helper_fnEv
    16 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads
"""


def test_ptxas_parser_counts_the_kernel_and_its_callees_spills():
    split, combine = parse_ptxas(SAMPLE_CALLEE)
    assert (split["spill_store_bytes"], split["spill_load_bytes"], split["stack_bytes"]) == (8, 8, 8)
    assert split["callees"] == ["_ZN4mlav22effective_splits_splitERKNS_6ParamsEll"]
    # a callee's spills are the calling kernel's; the stack reported is the kernel's own frame
    assert (combine["spill_store_bytes"], combine["spill_load_bytes"], combine["stack_bytes"]) == (4, 4, 0)
    assert combine["registers"] == 52 and combine["static_smem_bytes"] == 4224


def test_dynamic_smem_comes_from_the_tile_template_arguments():
    assert dynamic_smem("_ZN4mlav23mla_verify_split_kernelILi64ELi64ELi2EEEvNS_6ParamsE") == (
        tiles.SM90.smem_bytes,
        "sm90",
    )
    assert dynamic_smem("_ZN4mlav23mla_verify_split_kernelILi32ELi16ELi3EEEvNS_6ParamsE") == (
        tiles.SM120.smem_bytes,
        "sm120",
    )
    assert dynamic_smem("_ZN4mlav2wg29mla_verify_split_wgmma_kernelENS_6ParamsE") == (231_424, "sm90wg")
    assert dynamic_smem("_ZN4mlav2wg32mla_verify_split_wgmma_ws_kernelILi0EEEvNS_6ParamsE") == (231_456, "sm90wg")
    assert dynamic_smem("_ZN4mlav2wg36mla_verify_split_wgmma_ws_fp8_kernelENS_6ParamsE") == (231_808, "sm90wg")
    assert dynamic_smem("_ZN4mlav25mla_verify_combine_kernelENS_6ParamsE") == (0, None)


def run_build(arch):
    return run_tool("verify_tools.build_check", "--arch", arch, "--json", timeout=900)


@pytest.mark.parametrize("arch,configs", [("sm_120a", {"sm120"}), ("sm_90a", {"sm90wg", "sm90", "sm120"})])
def test_real_nvcc_build_has_no_spills_and_fits_smem(nvcc_path, arch, configs):
    code, doc = run_build(arch)
    assert code == 0 and doc["ok"], doc.get("errors")
    s = doc["summary"]
    assert s["arch"] == arch and s["spill_bytes"] == 0
    assert 0 < s["max_smem_bytes"] <= tiles.SMEM_LIMIT[arch]
    assert 0 < s["max_registers"] <= 255
    names = {k["tile_config"] for k in doc["kernels"]}
    assert names == configs | {None}, "split kernel per tile config plus the combine kernel"
    unlabeled = [k["name"] for k in doc["kernels"] if k["tile_config"] is None]
    assert all("combine" in n for n in unlabeled), f"split kernels read as combine kernels (0 B of smem): {unlabeled}"
    assert all(k["stack_bytes"] == 0 for k in doc["kernels"]), "no stack frame on the hot paths"


def test_missing_nvcc_is_blocked_with_exit_75(tmp_path):
    code, doc = run_tool("verify_tools.build_check", "--arch", "sm_90a", "--json", "--nvcc", str(tmp_path / "no-nvcc"))
    assert code == 75 and doc["ok"] is False and "nvcc" in doc["blocked"]


def test_unknown_arch_is_a_usage_error():
    proc = subprocess.run(
        [sys.executable, "-m", "verify_tools.build_check", "--arch", "sm_80"],
        cwd=str(KERNELS),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "--arch" in proc.stderr
