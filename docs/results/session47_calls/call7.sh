#!/usr/bin/env bash
# Session 47 call 7 (never ran: no machine; written for commit 6455005, whose kernel had the VLOAD and HALF macros;
# call8.sh is its form on the shipped tree): HALF over VLOAD. Trees: base (the checkout as committed, VLOAD off: the
# shipped kernel of session 46), cur (the checkout with -DMLAV_FP8_VLOAD=1) and half (VLOAD + -DMLAV_FP8_HALF=1: the
# producer hands atoms 4-8 to the consumers before it writes atoms 0-3, so the S warpgroup's QK starts on them half a
# conversion earlier). A/B of the fp8 cache's f16 path (each tree's output compared bitwise with base's), then parity,
# synccheck and racecheck of half as the checkout, then its trace.
set -o pipefail
. tests/device/call_budget.sh 300  # R, L, left, say, lim
. tests/device/call_steps.sh       # defs, build_trees, ab, use, parity_cases, san_case
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee -a "$L"
C=$MLAV_CSRC
rm -rf /tmp/base && cp -r $C /tmp/base
defs /tmp/vload MLAV_FP8_VLOAD=1
defs /tmp/half MLAV_FP8_VLOAD=1 MLAV_FP8_HALF=1
cp /tmp/vload/mla_verify.cu $C/mla_verify.cu
build_trees base half
say built
cd kernels || exit 2
ab half 120 base=/tmp/base,half=/tmp/half --ab-kv fp8 --ab-fp8-paths f16 --ab-reps 3 --ab-gb-trees none \
  --shapes 4:131072:4:16,8:32768:8:16,4:65536:4:64,1:131072:8:16,32:8192:8:16
say ab
use half
parity_cases half 45 $FP8_CASES,graph_fp8_b2_n8_h16
san_case synccheck fp8_b8_long_splits_ws_h16
san_case racecheck fp8_b8_long_splits_ws_h16
timeout "$(lim 60)" python3 "$R/tests/device/dense_trace.py" 4:131072:4:16,4:65536:4:64 --fp8 --fp8-path f16 \
  --out "$OUT/trace_half.json" > "$OUT/trace_half.txt" 2>&1
echo "trace rc=$?" | tee -a "$L"
grep '^\[trace\]' "$OUT/trace_half.txt" | tee -a "$L"
say done
