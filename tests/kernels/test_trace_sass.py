"""The dense kernel's trace build in machine code: every phase mark's clock read stays where the source put it.

ptxas rematerialized the previous mark's clock read as a fresh read where it was used (session 45's build, the ASYM
kernels' PV mark: that slot summed negative); verify_tools.sass finds such reads in the SASS (no GPU)."""

from __future__ import annotations

from tests.support.tools import run_tool
from verify_tools.sass import clock_reads, parse_sass

# cuobjdump -sass of session 45's trace build, the fp8 kernel's S warpgroup (trimmed): the PV mark's clock read
# (a5b0) and the rematerialized read of the previous mark's clock (a5c0), subtracted from each other at a5f0
DEFECTIVE = """
\t\tFunction : _ZN4mlav2wg36mla_verify_split_wgmma_ws_fp8_kernelENS_6ParamsE
        /*9ab0*/                   CS2R.32 R155, SR_CLOCKLO ;                     /* 0x00000000009b7805 */
        /*9ac0*/                   WARPSYNC.ALL ;                                 /* 0x0000000000007948 */
        /*9ad0*/                   IADD3 R4, R4, -UR17, R155 ;                    /* 0x8000001104047c10 */
        /*a580*/                   HGMMA.64x256x16.F32 R24, gdesc[UR16].tnspB, R24, gsb0 ; /* 0x43e00000101879f0 */
        /*a590*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;                /* 0x00008000000079c5 */
        /*a5a0*/                   SYNCS.ARRIVE.TRANS64.A1T0 RZ, [UR33+0x38410], RZ ; /* 0x038410ffffff79a7 */
        /*a5b0*/                   S2UR UR20, SR_CLOCKLO ;                        /* 0x00000000001479c3 */
                                                                                  /* 0x000ff00000005000 */
        /*a5c0*/                   S2UR UR16, SR_CLOCKLO ;                        /* 0x00000000001079c3 */
        /*a5d0*/                   NOP ;                                          /* 0x0000000000007918 */
        /*a5e0*/                   UIADD3 UR6, UR6, 0x1, URZ ;                    /* 0x0000000106067890 */
        /*a5f0*/                   UIADD3 UR29, UR29, UR20, -UR16 ;               /* 0x000000141d1d7290 */
\t\tFunction : _ZN4mlav25mla_verify_combine_kernelILi8ELb0EEEvNS_6ParamsE
        /*0000*/                   LDC R1, c[0x0][0x28] ;                         /* 0x00000a00ff017b82 */
"""


def test_parser_splits_functions_and_flags_a_clock_read_right_after_another():
    fns = parse_sass(DEFECTIVE)
    fp8 = fns["_ZN4mlav2wg36mla_verify_split_wgmma_ws_fp8_kernelENS_6ParamsE"]
    assert len(fp8) == 11 and fp8[0] == "CS2R.32 R155, SR_CLOCKLO"
    assert clock_reads(fp8) == (3, [7])  # the read at a5c0 follows a5b0's
    assert clock_reads(fns["_ZN4mlav25mla_verify_combine_kernelILi8ELb0EEEvNS_6ParamsE"]) == (0, [])


def test_trace_build_keeps_every_clock_read_apart(nvcc_path, cuobjdump_path):
    code, doc = run_tool("verify_tools.sass", "--arch", "sm_90a", "--json", "--cuobjdump", cuobjdump_path, timeout=600)
    assert code == 0 and doc["ok"], doc["errors"]
    ws = [k for k in doc["kernels"] if "mla_verify_split_wgmma_ws" in k["name"]]
    # the bf16 kernel's two consumer modes and the fp8 kernel, plain and gated (fp8_graph_gate)
    assert len(ws) == 4 and all(k["clock_reads"] >= 10 and k["pairs"] == [] for k in ws)
