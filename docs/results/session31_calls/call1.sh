#!/usr/bin/env bash
# Session 31, call 1 (carry .abbase .whl-fi .whl-flashmla; ~8 min):
# 1. session30_calls/call7.sh as prepared: the grid-stride combine on bf16 partials prefetching none
#    (gs_prefetch0.patch applied to this checkout) against base (before the prefetch) and j4 (shipped).
# 2. tests/device/flashinfer_peer.sh on the shipped kernel (the patch undone: j4's .cuh copied back) against
#    FlashInfer FA2 / FA3 and FlashMLA, same inputs, same run (session 8's six shapes).
R=$PWD
bash docs/results/session30_calls/call7.sh 2>&1 | tail -25
cd "$R" && cp .abbase/j4/mla_verify_kernel.cuh kernels/mla_verify/csrc/ && FI_TIMEOUT_S=300 OUT=$OUT bash tests/device/flashinfer_peer.sh 2>&1 | grep -v "^\[" | tail -20
