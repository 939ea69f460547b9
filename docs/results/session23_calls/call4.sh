#!/usr/bin/env bash
# Session 23 call 4 (diagnostics, no kernel change): why the per-CTA kernel's ASYM CTAs gain less than the ASYM kernel's
# (call 3 at B=8 L=32k, 64 tiles per CTA, every CTA on the ASYM body: 0.981 vs 0.938 of the shipped time). The trace
# build (dense_trace.py: SM cycles per tile and phase, per warpgroup) of MODE 1 (-DMLAV_WS=2) and MODE 2 (-DMLAV_WS=3)
# of the checkout at that shape and at B=32 L=8k; then the sparse kernel's cold-code cost at more B=1 shapes (call 2:
# w64 fp8 at B=1 n=4 H=64 4.22 us of 27.0, bf16 <= 0.1). Run from the repository root, no carry.
set -o pipefail
export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16 PYTHONUNBUFFERED=1
R=$PWD; L=$OUT/log.txt; say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a "$L"; }
export PYTHONPATH=$R/kernels:$R
cd kernels || exit 2
for ws in 2 3; do
  timeout 150 python3 ../tests/device/dense_trace.py 8:32768:8:16,32:8192:8:16 --define MLAV_WS=$ws --out "$OUT/trace_ws$ws.json" 2>>"$L" | grep "^\[trace\]" | sed "s/^/WS=$ws /" | tee -a "$L"
  say "trace WS=$ws"
done
timeout 150 python3 ../tests/device/cold_code.py 1:32768:4:16,1:32768:4:64,1:32768:4:128,2:32768:4:64,1:4096:4:64 --dsa --out "$OUT/dsa_cold_code.json" 2>>"$L" | tee -a "$L"
say done
