#!/usr/bin/env bash
# Session 46 call 2 (run inline on the machine call 1 left warm; ~95 s of device time left): the conv3 tree alone
# (conv3_mid.patch, MLAV_FP8_CONV=3, producer 96 / V warpgroup 168 registers, no MID) built as the checkout's csrc,
# then parity of every fp8 case and the fp8 graph case, and racecheck on the long-split fp8 case.
. tests/device/call_budget.sh 95; . tests/device/call_steps.sh; git apply docs/results/session45_calls/conv3_mid.patch && defs /tmp/conv3b MLAV_FP8_CONV=3 MLAV_FP8_PREG=96 MLAV_FP8_VREG=168 && use conv3b && say built && parity_cases conv3 35 $FP8_CASES,graph_fp8_b2_n8_h16 && san_case racecheck fp8_b8_long_splits_ws_h16; say done
