#!/usr/bin/env bash
# Prepared in session 44, not run. No carry (nvidia-h100-x1), ~370 s: bash docs/results/session44_calls/next_call2.sh
# early_fp8.patch (compiled on the host: 0 spills; without the define every kernel's machine code is the shipped one):
# the fp8 kernel's producer issues tile t + 1 as soon as the consumers free its stage (empty of tile t - 1), polling
# that and tile t's landing (a new mbarrier per stage) instead of issuing only after converting tile t. Why: session
# 44 read the shipped kernel as bound by one tile's DRAM trip per tile (Nsight Compute: DRAM 53%, tensor pipe 44%,
# 53% of warp cycles in long-scoreboard waits at (4, 131072, 4, 16)); the conversion (~1,300 cycles a tile) ran
# with no rows in flight. cur = the checkout with the patch and -DMLAV_WS_FP8_EARLY=1; base = the shipped checkout.
# 1. A/B fp8 cache, f16 path, cur vs base on the long-split rows (bitwise against base: the same arithmetic);
# 2. parity of every fp8 case and the fp8 graph case on cur; racecheck and synccheck on the long-split case.
# 3. asym_vote.patch (a review item: the ASYM S step's scale / max / vote, written twice, in the bf16 kernel and the
#    fp8 kernel, as one helper asym_scale_vote): the fp8 kernel's machine code is unchanged, the bf16 ASYM kernel's is
#    not (321 instructions rescheduled; its PTX differs only in virtual register numbering), so it lands only if the
#    bf16 ASYM rows are bitwise and within the spread (cur's bf16 kernels are base's: the spread).
# Keep rules: EARLY bitwise equal to base, parity passing, sanitizers clean, cur <= 0.97 of base on the memory-floored
# row; vote bitwise and 0.99-1.01 of base.
set -o pipefail
. tests/device/call_budget.sh 370  # R, L, left, say, lim
. tests/device/call_steps.sh       # build_trees, ab, parity_cases, san_case
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader | tee -a "$L"
C=$MLAV_CSRC
rm -rf /tmp/base /tmp/vote && cp -r $C /tmp/base
{ git apply docs/results/session44_calls/asym_vote.patch && cp -r $C /tmp/vote \
  && git apply -R docs/results/session44_calls/asym_vote.patch; } 2>>"$L" || { echo "vote patch" | tee -a "$L"; exit 4; }
git apply docs/results/session44_calls/early_fp8.patch 2>>"$L" || { echo "patch did not apply" | tee -a "$L"; exit 4; }
{ echo "#define MLAV_WS_FP8_EARLY 1"; cat $C/mla_verify.cu; } > /tmp/m.cu && mv /tmp/m.cu $C/mla_verify.cu
build_trees base vote
say built
cd kernels || exit 2
ab early 120 base=/tmp/base --ab-kv fp8 --ab-fp8-paths f16 --ab-reps 3 --ab-gb-trees none \
  --shapes 4:131072:4:16,8:32768:8:16,32:8192:8:16,4:65536:4:64,1:131072:8:16
say ab
parity_cases early 60 $FP8_CASES,graph_fp8_b2_n8_h16
san_case racecheck fp8_b8_long_splits_ws_h16
san_case synccheck fp8_b8_long_splits_ws_h16
say sanitizers
ab vote 70 base=/tmp/base,vote=/tmp/vote --ab-kv bf16 --ab-reps 3 --ab-gb-trees none \
  --shapes 8:32768:8:16,32:8192:8:16,16:32768:4:16
say done
