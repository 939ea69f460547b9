#!/usr/bin/env bash
# Session 20, call 1: tests/device/wgmma_rate.cu with the session-20 variants (ld, cur, cur_ld, seesaw, seesaw_ld):
# the shipped design's MMA work per tile against the seesaw's (each warpgroup one whole 64-token tile's S at
# m64n64, PV over both tiles), with and without the next tile's cp.async writes into smem. Session 19 call 5 found
# the shipped S (m64n32k16 SS) at 2/3 of the tensor peak; this asks how much of the kernel's S phase is smem
# bandwidth and what the seesaw's MMA ceiling is. Run from the repository root, ~1 min.
set -o pipefail
nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 -I kernels/mla_verify/csrc -o /tmp/wgmma_rate \
  tests/device/wgmma_rate.cu || exit 2
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$OUT/log.txt"
for rep in 1 2; do /tmp/wgmma_rate; done | tee -a "$OUT/log.txt" > "$OUT/wgmma_rate.jsonl"
