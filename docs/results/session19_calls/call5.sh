#!/usr/bin/env bash
# Session 19, call 5: wgmma chain rates without loads or softmax (tests/device/wgmma_rate.cu): why the kernel's S
# phase (36 x m64n32k16 per warpgroup) takes ~2,280 SM cycles per tile where PV (4 x m64n256k16, similar FLOPs)
# takes ~1,110, and why call 4's split-K S (18 x m64n64k16) was slower. Run from the repository root, ~1 min.
set -o pipefail
nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 -I kernels/mla_verify/csrc -o /tmp/wgmma_rate \
  tests/device/wgmma_rate.cu || exit 2
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$OUT/log.txt"
for rep in 1 2; do /tmp/wgmma_rate; done | tee -a "$OUT/log.txt" > "$OUT/wgmma_rate.jsonl"
