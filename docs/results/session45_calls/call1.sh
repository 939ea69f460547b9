#!/usr/bin/env bash
# Prepared in session 44 (its device time was spent), not run. The next session's first command, no carry
# (nvidia-h100-x1), ~420 s: bash docs/results/session44_calls/next_call1.sh
# Where the shipped fp8 kernel's time goes (the warp-specialized fp8 kernel with ASYM consumers, f16 arithmetic), from
# the trace build (tests/device/dense_trace.py; rows: wg0 = the S warpgroup, wg1 = the V warpgroup, producer = slot 1
# its wait for a free stage, slot 2 ("issue") a tile's conversion plus the next tile's issue), per 64-token tile:
# 1. the fp8 cache at (4, 131072, 4, 16) and (8, 32768, 8, 16);
# 2. the same with -DMLAV_DIAG_NOLOAD=1 (no fp8 rows loaded from tile 2 on; the producer still converts and hands
#    over every tile): the kernel without the gather. If its cycles per tile drop far below the loaded build's
#    (~5,900 at the memory-floored row, session 44), the gather's latency sets the time (session 44's reading of
#    Nsight Compute) and bytes in flight are the lever; if not, the conversion or the consumers are;
# 3. the bf16 cache at the same shapes for comparison (ASYM at (8, 32768, 8, 16), MODE 0 at (4, 131072, 4, 16));
# 4. early_fp8.patch's producer (-DMLAV_WS_FP8_EARLY=1: tile t + 1 issued as soon as its stage frees, polled while
#    tile t's rows fly) traced the same way; next_call2.sh times it.
# Nothing shipped changes.
set -o pipefail
. tests/device/call_budget.sh 420  # R, L, left, say, lim
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader | tee -a "$L"
cd kernels || exit 2
trace() {  # NAME, then dense_trace.py's arguments
  local name=$1
  shift
  timeout "$(lim 110)" python3 "$R/tests/device/dense_trace.py" "$@" --out "$OUT/trace_$name.json" \
    > "$OUT/trace_$name.txt" 2>&1
  echo "trace $name rc=$?" | tee -a "$L"
  grep '^\[trace\]' "$OUT/trace_$name.txt" | tee -a "$L"
  python3 -c "
import json, sys
for r in json.load(open(sys.argv[1]))['rows']:
    print(r['B'], r['L'], r['n'], r['H'], 'wg1', r['wg1']['cycles_per_tile'], 'producer', r.get('producer'))
" "$OUT/trace_$name.json" 2>&1 | tee -a "$L"
  say "trace $name"
}
S=4:131072:4:16,8:32768:8:16
trace fp8 $S --fp8 --fp8-path f16
trace fp8_noload $S --fp8 --fp8-path f16 --define MLAV_DIAG_NOLOAD=1
trace bf16 $S
C=kernels/mla_verify/csrc
{ cd "$R" && git apply docs/results/session44_calls/early_fp8.patch && rm -rf /tmp/early && cp -r $C /tmp/early \
  && git apply -R docs/results/session44_calls/early_fp8.patch && cd kernels; } 2>>"$L" || { echo "no patch" | tee -a "$L"; exit 4; }
trace fp8_early $S --fp8 --fp8-path f16 --csrc /tmp/early --define MLAV_WS_FP8_EARLY=1
say done
