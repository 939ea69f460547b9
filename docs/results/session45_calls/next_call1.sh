#!/usr/bin/env bash
# Superseded in session 46: its call 1 ran the conv3 / MID part (conv3 shipped, so conv3_mid.patch no longer applies
# on the tree); the rest moved to docs/results/session46_calls/next_call1.sh.
# Prepared in session 45 (its device time went to refused starts), not run. The next session's first command, no
# carry (nvidia-h100-x1), ~460 s: bash docs/results/session45_calls/next_call1.sh
# Session 45's calls 1-2 traced the shipped fp8 kernel (f16 arithmetic, ASYM consumers): per 64-token tile the producer spends
# ~4,080 cycles in "issue" (tile t + 1's landing plus its conversion) at (4, 131072, 4, 16), 2,360 with no gather
# (MLAV_DIAG_NOLOAD), where it then waits 1,275 cycles for a free stage: without the gather the consumers set the
# time (153.8 vs 184.4 us). The conversion (5 phases, 4 producer barriers, phases 3-5 one block each) is the part
# of the producer's cycle this call shortens: MLAV_FP8_CONV=3 converts in 3 phases with 2 barriers (raw bytes held
# in up to 40 registers), which needs the producer at 96 registers (the V warpgroup at 168; 88 / 176 spill 12 B).
# MLAV_FP8_MID=1 also issues tile t + 1 between the conversion's phases once its stage is free (mbar_test), not after
# the conversion: by the trace the stage frees ~3,050 cycles after a tile's full arrive, inside the next conversion.
# Both are in conv3_mid.patch (compiled on the host: 0 spills at 96 / 168, the trace build too).
#   cur = the checkout + the patch with CONV=3, MID, PREG 96, VREG 168;  conv3 = without MID;
#   preg = the 5-phase conversion at 96 / 168;  base = the checkout (shipped).
# 1. A/B fp8 cache, f16 path, on five long-split rows (bitwise against base: the same arithmetic);
# 2. parity of every fp8 case and the fp8 graph case on cur, racecheck and synccheck on it;
# 3. the trace build of cur at the two traced shapes (the producer's slots against call 1's 177 / 4,078, and the
#    producer's prologue split: wait for Q, Q's conversion, wait for tile 0: session 45 call 1 put the whole prologue
#    at ~25,000 cycles per CTA against the bf16 producer's ~5,200); parity on conv3 (step 3 runs only as far as the
#    budget goes: CALL_BUDGET_S).
# vstep = the checkout + asym_v_step.patch (the ASYM V warpgroup's step as one helper for both kernels, a review
# item: the bf16 kernels' machine code unchanged, the fp8 kernel's rescheduled, 188 instructions).
# Keep rules: bitwise, parity passing, sanitizers clean, cur <= 0.97 of base at (4, 131072, 4, 16); vstep bitwise and
# 0.99-1.01 of base (as asym_vote.patch in session 45 call 2).
set -o pipefail
. tests/device/call_budget.sh 460  # R, L, left, say, lim
. tests/device/call_steps.sh       # defs, build_trees, ab, parity_cases, san_case, use
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader | tee -a "$L"
C=$MLAV_CSRC
rm -rf /tmp/base /tmp/vstep && cp -r $C /tmp/base
V=docs/results/session45_calls/asym_v_step.patch  # review item: one ASYM V step for the bf16 and fp8 kernels
{ git apply $V && cp -r $C /tmp/vstep && git apply -R $V; } 2>>"$L" || { echo "vstep patch" | tee -a "$L"; exit 4; }
git apply docs/results/session45_calls/conv3_mid.patch 2>>"$L" || { echo "patch did not apply" | tee -a "$L"; exit 4; }
defs /tmp/preg MLAV_FP8_PREG=96 MLAV_FP8_VREG=168
defs /tmp/conv3 MLAV_FP8_CONV=3 MLAV_FP8_PREG=96 MLAV_FP8_VREG=168
defs /tmp/cur MLAV_FP8_CONV=3 MLAV_FP8_MID=1 MLAV_FP8_PREG=96 MLAV_FP8_VREG=168
cp /tmp/cur/mla_verify.cu $C/mla_verify.cu
build_trees base preg conv3 vstep
say built
cd kernels || exit 2
ab conv 150 base=/tmp/base,preg=/tmp/preg,conv3=/tmp/conv3,vstep=/tmp/vstep --ab-kv fp8 --ab-fp8-paths f16 \
  --ab-reps 3 --ab-gb-trees none --shapes 4:131072:4:16,8:32768:8:16,32:8192:8:16,4:65536:4:64,1:131072:8:16
say ab
parity_cases mid 50 $FP8_CASES,graph_fp8_b2_n8_h16
san_case racecheck fp8_b8_long_splits_ws_h16
san_case synccheck fp8_b8_long_splits_ws_h16
say sanitizers
trace() {  # NAME CSRC
  timeout "$(lim 75)" python3 "$R/tests/device/dense_trace.py" 4:131072:4:16,8:32768:8:16 --fp8 --fp8-path f16 \
    --csrc "$2" --out "$OUT/trace_$1.json" > "$OUT/trace_$1.txt" 2>&1
  echo "trace $1 rc=$?" | tee -a "$L"
  grep '^\[trace\]' "$OUT/trace_$1.txt" | sed 's/wg0.*producer/producer/' | tee -a "$L"
}
trace mid "$R/$C"
say trace
use conv3
parity_cases conv3 45 $FP8_CASES,graph_fp8_b2_n8_h16
say done
