#!/usr/bin/env bash
# Session 47 call 6 (inline, 54 s): the phase-2 bench (no peers) with VLOAD as the checkout's build.
# Ran inline on the working tree of that moment (the fp8 kernel's VLOAD macro, before commit 6455005).
. tests/device/call_budget.sh 330
. tests/device/call_steps.sh
defs /tmp/vload MLAV_FP8_VLOAD=1 && use vload && say built
bench_rows 300; say done
