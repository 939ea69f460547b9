#!/usr/bin/env bash
# Session 31, call 2 (no carry; ~3 min): does the split rule (tuned on the v4 kernel, fp32 partials) still pick the
# fastest count on the shipped kernel (bf16 partials through the staged epilogue at B=1, the combine prefetch)?
# tests/device/split_sweep.py: graph replays, L2 flushed, min of 3 interleaved medians per count, over the rule's own.
export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16 PYTHONUNBUFFERED=1
R=$PWD; L=$OUT/log.txt; say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a "$L"; }
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader | tee -a "$L"
export PYTHONPATH=$R/kernels:$R
python3 -c "from mla_verify._build import load; load('sm_90a')" >>"$L" 2>&1; say built
timeout 200 python3 tests/device/split_sweep.py 1:512:8:16,1:4096:8:16,1:16384:8:16,1:32768:8:16,1:131072:8:16 \
  --splits 9,17,22,33,44,55,65,66 --out "$OUT/sweep_b1_bf16.json" 2>&1 | grep sweep | tee -a "$L"
timeout 100 python3 tests/device/split_sweep.py 4:4096:4:16,4:32768:4:16,2:32768:8:16 --splits 9,11,17,22,33 \
  --out "$OUT/sweep_batched_bf16.json" 2>&1 | grep sweep | tee -a "$L"
timeout 100 python3 tests/device/split_sweep.py 1:4096:8:16,1:32768:8:16 --splits 17,33,44,65,66 --kv fp8 \
  --out "$OUT/sweep_b1_fp8.json" 2>&1 | grep sweep | tee -a "$L"
say done
