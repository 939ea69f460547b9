#!/usr/bin/env bash
# One device call for the sm90ss (seesaw) dense config (issue 13): JIT build, parity of the configs in
# SS_CONFIGS (default sm90ss: every case and graph case; fp8 cases are skipped with the reason), the
# bench on SS_SHAPES (every config built for the arch timed per shape in one process: configs_us),
# then compute-sanitizer racecheck + synccheck of sm90ss on one small case while time is left.
# Each step runs under `timeout` (a hung kernel costs its step, not the call). Writes under $OUT:
# log.txt, parity.json, bench.json, sanitizer.txt.
# Usage (device tool, no carry): SS_DEADLINE=480 bash tests/device/seesaw_run.sh
set -o pipefail
OUT=${OUT:-/tmp/ss-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 MAX_JOBS=16 ORCHESTRATOR_KERNEL_CACHE=/tmp/mlav-cache
export PYTHONPATH=$PWD/kernels${PYTHONPATH:+:$PYTHONPATH}
LOG="$OUT/log.txt"
DL=${SS_DEADLINE:-480}
CONFIGS=${SS_CONFIGS:-sm90ss}
SHAPES=${SS_SHAPES:-1:4096:8:16,1:32768:8:16,1:131072:8:16,8:32768:8:16,32:8192:8:16,4:131072:4:16,4:65536:4:64}
say() { echo "== $* (t=${SECONDS}s)" | tee -a "$LOG"; }
lim() { local l=$((DL - SECONDS - 5)); [ "$l" -gt "$1" ] && l=$1; [ "$l" -lt 1 ] && l=1; echo "$l"; }
say "host: $(nvidia-smi -L 2>&1 | head -1); tree $(git rev-parse --short HEAD 2>/dev/null)"
say "JIT build"
timeout "$(lim 240)" python3 -c "
import time, torch; t=time.time()
from mla_verify._build import load
from mla_verify.api import device_arch
a = device_arch(torch.device('cuda')); load(a); print('jit build', a, 's', round(time.time()-t,1))" 2>&1 | tail -3 | tee -a "$LOG"
say "parity --configs $CONFIGS (limit $(lim 150) s)"
timeout "$(lim 150)" python3 -m verify_tools.parity --configs "$CONFIGS" ${SS_PARITY_ARGS:-} --json > "$OUT/parity.json" 2> >(tee -a "$LOG" >&2)
echo "parity rc=$?" | tee -a "$LOG"
python3 -c "import json;d=json.load(open('$OUT/parity.json'));print('parity ok', d.get('ok'), d.get('summary'))" 2>&1 | tee -a "$LOG"
say "bench $SHAPES (limit $(lim 200) s)"
timeout "$(lim 200)" python3 -m verify_tools.bench --json --no-sglang --no-flashmla --no-graph-buffer --shapes "$SHAPES" > "$OUT/bench.json" 2> >(grep "^\[bench\]" | tee -a "$LOG" >&2)
echo "bench rc=$?" | tee -a "$LOG"
for tool in racecheck synccheck; do
  if [ $((DL - SECONDS)) -gt 40 ]; then
    say "compute-sanitizer $tool: sm90ss on b1_prefix0_n4_h16_tree,b2_n16_h128_tree_prefix3k"
    timeout "$(lim 60)" compute-sanitizer --tool "$tool" --kernel-name kns=seesaw --print-limit 20 \
      --log-file "$OUT/san_tool.txt" python3 -m verify_tools.parity --configs sm90ss \
      --cases b1_prefix0_n4_h16_tree,b2_n16_h128_tree_prefix3k --json > "$OUT/san_parity.json" 2>/dev/null
    echo "### $tool rc=$?" >> "$OUT/sanitizer.txt"; cat "$OUT/san_tool.txt" >> "$OUT/sanitizer.txt" 2>/dev/null
    python3 -c "import json;d=json.load(open('$OUT/san_parity.json'));print('parity under $tool ok=',d['ok'])" >> "$OUT/sanitizer.txt" 2>&1
    tail -3 "$OUT/sanitizer.txt" | tee -a "$LOG"
  else say "$tool skipped: $((DL - SECONDS)) s left"; fi
done
rm -f "$OUT/san_tool.txt" "$OUT/san_parity.json"
say "done"
