#!/usr/bin/env bash
# Session 47 call 4 (inline, 108 s): VLOAD with s_done arrived only where the V warpgroup waits (j + 2 < n_pre):
# synccheck, the A/B on five rows, parity, racecheck.
# Ran inline on the working tree of that moment (the fp8 kernel's VLOAD macro, before commit 6455005).
. tests/device/call_budget.sh 220
. tests/device/call_steps.sh
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee -a "$L"
defs /tmp/vload MLAV_FP8_VLOAD=1 && build_trees vload && say built && cd kernels &&
  san_case synccheck fp8_b8_long_splits_ws_h16
ab vload 100 vload=/tmp/vload --ab-kv fp8 --ab-fp8-paths f16 --ab-reps 3 --ab-gb-trees none \
  --shapes 4:131072:4:16,8:32768:8:16,4:65536:4:64,1:131072:8:16,32:8192:8:16
say ab
use vload && parity_cases vload 45 $FP8_CASES,graph_fp8_b2_n8_h16
san_case racecheck fp8_b8_long_splits_ws_h16
say done
