#!/usr/bin/env bash
# One device call for the sm90ss (seesaw) dense config, after seesaw_run.sh: parity of sm90ss (every
# case and graph case; fp8 cases skipped with the reason), then a same-process A/B (bench --tree-ab):
# this tree and each carried SS_TREES tree (name=csrc_dir, e.g. noload=../.ssvar/noload built with
# MLAV_DIAG_NOLOAD=1) x the configs in SS_AB_CONFIGS on SS_SHAPES, then racecheck + synccheck of sm90ss
# on two small cases while time is left. Writes $OUT/{log.txt,parity.json,ab.json,sanitizer.txt}.
# Usage (device tool, carry .ssvar): SS_TREES=noload=../.ssvar/noload bash tests/device/seesaw_ab.sh
set -o pipefail
OUT=${OUT:-/tmp/ss-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 MAX_JOBS=16 ORCHESTRATOR_KERNEL_CACHE=/tmp/mlav-cache
export PYTHONPATH=$PWD/kernels${PYTHONPATH:+:$PYTHONPATH}
LOG="$OUT/log.txt"
DL=${SS_DEADLINE:-500}
SHAPES=${SS_SHAPES:-1:4096:8:16,1:32768:8:16,1:131072:8:16,8:32768:8:16,32:8192:8:16,4:131072:4:16,4:65536:4:64}
say() { echo "== $* (t=${SECONDS}s)" | tee -a "$LOG"; }
lim() { local l=$((DL - SECONDS - 5)); [ "$l" -gt "$1" ] && l=$1; [ "$l" -lt 1 ] && l=1; echo "$l"; }
say "host: $(nvidia-smi -L 2>&1 | head -1)"
say "JIT builds (this tree and the SS_TREES trees, in parallel)"
for d in $(echo "${SS_TREES:-}" | tr ',' '\n' | sed 's/^[^=]*=//'); do
  (cd kernels && timeout "$(lim 240)" python3 -c "from verify_tools.bench import load_tree; load_tree('sm_90a', '$d')") >>"$LOG" 2>&1 &
done
timeout "$(lim 240)" python3 -c "
import time, torch; t=time.time()
from mla_verify._build import load
load('sm_90a'); print('jit build s', round(time.time()-t,1))" 2>&1 | tail -3 | tee -a "$LOG"
wait
say "parity --configs sm90ss (limit $(lim 120) s)"
timeout "$(lim 120)" python3 -m verify_tools.parity --configs sm90ss --json > "$OUT/parity.json" 2> >(tee -a "$LOG" >&2)
echo "parity rc=$?" | tee -a "$LOG"
python3 -c "import json;d=json.load(open('$OUT/parity.json'));print('parity ok', d.get('ok'), d.get('summary'))" 2>&1 | tee -a "$LOG"
T=""; [ -n "${SS_TREES:-}" ] && T="$SS_TREES"
say "A/B trees cur${T:+,$T} x configs ${SS_AB_CONFIGS:-sm90wg,sm90ss} (limit $(lim 240) s)"
(cd kernels && timeout "$(lim 240)" python3 -m verify_tools.bench --tree-ab "$T" --ab-configs "${SS_AB_CONFIGS:-sm90wg,sm90ss}" \
  --ab-gb-trees none --ab-reps "${SS_AB_REPS:-2}" --shapes "$SHAPES" --ab-out "$OUT/ab.json" > /dev/null) 2> >(grep "^\[ab\]\|Error\|error" | tee -a "$LOG" >&2)
echo "ab rc=$?" | tee -a "$LOG"
for tool in racecheck synccheck; do
  if [ $((DL - SECONDS)) -gt 40 ]; then
    say "compute-sanitizer $tool: sm90ss on b1_prefix0_n4_h16_tree,b3_tree_n32_h16_valias_idx64"
    timeout "$(lim 60)" compute-sanitizer --tool "$tool" --kernel-name kns=seesaw --print-limit 10 \
      --log-file "$OUT/san_tool.txt" python3 -m verify_tools.parity --configs sm90ss \
      --cases b1_prefix0_n4_h16_tree,b3_tree_n32_h16_valias_idx64 --json > "$OUT/san_parity.json" 2>/dev/null
    echo "### $tool rc=$?" >> "$OUT/sanitizer.txt"; cat "$OUT/san_tool.txt" >> "$OUT/sanitizer.txt" 2>/dev/null
    python3 -c "import json;d=json.load(open('$OUT/san_parity.json'));print('parity under $tool ok=',d['ok'])" >> "$OUT/sanitizer.txt" 2>&1
    tail -2 "$OUT/sanitizer.txt" | tee -a "$LOG"
  else say "$tool skipped: $((DL - SECONDS)) s left"; fi
done
rm -f "$OUT/san_tool.txt" "$OUT/san_parity.json"
say "done"
