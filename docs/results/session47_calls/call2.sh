#!/usr/bin/env bash
# Session 47 call 2 (inline on the warm machine, 87 s): the first VLOAD build (-DMLAV_FP8_VLOAD=1) against the
# checkout (cur), fp8 f16 path; parity of every fp8 case and the fp8 graph case; racecheck.
# Ran inline on the working tree of that moment (the VLOAD macro, before commit 6455005 and the s_done fix).
. tests/device/call_budget.sh 230
. tests/device/call_steps.sh
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee -a "$L"
defs /tmp/vload MLAV_FP8_VLOAD=1 && build_trees vload && say built && cd kernels &&
  ab vload 100 vload=/tmp/vload --ab-kv fp8 --ab-fp8-paths f16 --ab-reps 3 --ab-gb-trees none \
    --shapes 4:131072:4:16,8:32768:8:16,4:65536:4:64,1:131072:8:16
say ab
use vload && parity_cases vload 45 $FP8_CASES,graph_fp8_b2_n8_h16
san_case racecheck fp8_b8_long_splits_ws_h16
say done
