#!/usr/bin/env bash
# Session 47 call 3 (inline, 48 s): synccheck of the first VLOAD build (512 errors: the S warpgroup arrived on s_done
# for every tile, the V warpgroup waited only where it issues a tile) and its trace.
# Ran inline on the working tree of that moment (the VLOAD macro, before commit 6455005 and the s_done fix).
. tests/device/call_budget.sh 150
. tests/device/call_steps.sh
defs /tmp/vload MLAV_FP8_VLOAD=1 && use vload && say built
san_case synccheck fp8_b8_long_splits_ws_h16
timeout $(lim 90) python3 $R/tests/device/dense_trace.py 4:131072:4:16,8:32768:8:16,4:65536:4:64 --fp8 --fp8-path f16 \
  --out $OUT/trace_vload.json > $OUT/trace_vload.txt 2>&1; echo "trace rc=$?" | tee -a $L
grep '^\[trace\]' $OUT/trace_vload.txt | tee -a $L; say done
