#!/usr/bin/env bash
# Session 47 call 5 (inline, 49 s): VLOAD's trace with the producer's slot split (slot 1: its wait for the raw rows'
# landing, slot 6: its wait for the stage's tile t - 2, slot 2: the conversion).
# Ran inline on the working tree of that moment (the fp8 kernel's VLOAD macro, before commit 6455005).
. tests/device/call_budget.sh 120
. tests/device/call_steps.sh
defs /tmp/vload MLAV_FP8_VLOAD=1 && use vload && say built
timeout $(lim 90) python3 $R/tests/device/dense_trace.py 4:131072:4:16,8:32768:8:16,4:65536:4:64 --fp8 --fp8-path f16 \
  --out $OUT/trace_vload.json > $OUT/trace_vload.txt 2>&1; echo "trace rc=$?" | tee -a $L
grep '^\[trace\]' $OUT/trace_vload.txt | tee -a $L; say done
