#!/usr/bin/env bash
# Session 47 call 8 (ran 22:26 on an H100 with CALL_BUDGET_S=150; the A/B's last step was cut by the budget): HALF
# over the shipped VLOAD kernel. Trees: base (the checkout: VLOAD, session 47) and half (base + half.patch: the
# producer arrives on full after atoms 4-8 and on a second barrier, full_b, after atoms 0-3; the S warpgroup issues
# QK's atoms 4-8 k-steps, waits full_b, then atoms 0-3). memcheck of the shipped kernel; A/B of the fp8 f16 path,
# bitwise against base; then parity, synccheck and racecheck of half. Keep rule: bitwise, parity and sanitizers clean,
# <= 0.98 on the H=16 rows.
set -o pipefail
. tests/device/call_budget.sh 200  # R, L, left, say, lim
. tests/device/call_steps.sh       # build_trees, ab, use, parity_cases, san_case
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee -a "$L"
C=$MLAV_CSRC
rm -rf /tmp/base /tmp/half && cp -r $C /tmp/base
{ git apply docs/results/session47_calls/half.patch && cp -r $C /tmp/half &&
  git apply -R docs/results/session47_calls/half.patch; } \
  2>>"$L" || { echo "half.patch" | tee -a "$L"; exit 4; }
build_trees base half
say built
cd kernels || exit 2
san_case memcheck fp8_b8_long_splits_ws_h16  # the shipped VLOAD kernel (the checkout's build)
ab half 90 base=/tmp/base,half=/tmp/half --ab-kv fp8 --ab-fp8-paths f16 --ab-reps 3 --ab-gb-trees none \
  --shapes 4:131072:4:16,8:32768:8:16,4:65536:4:64,1:131072:8:16
say ab
use half
parity_cases half 40 $FP8_CASES,graph_fp8_b2_n8_h16
san_case synccheck fp8_b8_long_splits_ws_h16
san_case racecheck fp8_b8_long_splits_ws_h16
say done
