#!/usr/bin/env bash
# Session 31, call 4 (carry .abbase; ~4-5 min): call 3 trimmed to fit what refused starts left of the device budget.
# 1. session30_calls/call7.sh as prepared (gs_prefetch0.patch applied to this checkout); 2. the split sweep on the
# shipped kernel (tree j4, built by call 7: --csrc /tmp/j4, same cache, no rebuild): B=1 n=8 H=16 at 4k / 32k / 128k and (4, 4096, 4, 16), bf16.
R=$PWD
bash docs/results/session30_calls/call7.sh 2>&1 | tail -14
cd "$R" || exit 3
export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16 PYTHONUNBUFFERED=1 PYTHONPATH=$R/kernels:$R
timeout 150 python3 tests/device/split_sweep.py 1:4096:8:16,1:32768:8:16,1:131072:8:16,4:4096:4:16 \
  --splits 9,17,33,44,65 --csrc /tmp/j4 --out "$OUT/sweep_bf16.json" 2>&1 | grep -v "^\s*$" | tail -6
