#!/usr/bin/env bash
# Session 35, call 2 (carry .abbase .abe1; <= 400 s). E2 (MLAV_ASYM_PIPE=2): the ASYM S warpgroup issues S(j+1) behind
# PV_lo(j) only once the V warpgroup has issued PV_hi(j) (mbarrier pv_issued), so the tensor pipe runs PV_lo(j),
# PV_hi(j), S(j+1) back to back. Call 1's E1 (S(j+1) at once: e1 = e303e30's csrc) ran 1.05-1.17x base's time on the
# ASYM rows; the guess: S(j+1) went ahead of PV_hi(j) in the pipe, delaying the stage's release (empty) by an S.
# Trees: base = f6777e7's csrc (shipped), e1, cur = E2. Keep E2 if its ASYM rows read <= 0.99 of base, bitwise,
# parity + replays pass, racecheck clean; else the MLAV_ASYM_PIPE code goes.
set -o pipefail
export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16 PYTHONUNBUFFERED=1
R=$PWD; L=$OUT/log.txt; START=$(date +%s); DEADLINE=$((START + ${CALL_BUDGET_S:-400}))
left() { echo $((DEADLINE - $(date +%s))); }
say() { echo "== $* ($(date +%T), ${SECONDS}s, left $(left)s)" | tee -a "$L"; }
lim() { local l; l=$(left); [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }
export PYTHONPATH=$R/kernels:$R
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader | tee -a "$L"
rm -rf /tmp/base /tmp/e1 && cp -r .abbase/kernels/mla_verify/csrc /tmp/base && cp -r .abe1/kernels/mla_verify/csrc /tmp/e1
for t in /tmp/base /tmp/e1; do
  python3 -c "import sys; from verify_tools.bench import load_tree; load_tree('sm_90a', sys.argv[1])" $t >>"$L" 2>&1 &
done
python3 -c "from mla_verify._build import load; load('sm_90a')" >>"$L" 2>&1 || { tail -5 "$L"; exit 3; }
wait; say built
cd kernels || exit 2
timeout "$(lim 200)" python3 -m verify_tools.bench --tree-ab base=/tmp/base,e1=/tmp/e1 --ab-kv bf16 --ab-reps 3 \
  --ab-gb-trees cur \
  --shapes 1:32768:8:16,8:32768:8:16,32:8192:8:16,4:65536:4:64,16:32768:4:16,2:16384:8:128 \
  --ab-out "$OUT/ab.json" >/dev/null 2>>"$OUT/ab_err.txt"
echo "ab rc=$?" | tee -a "$L"
python3 -m verify_tools.bench --ab-summary "$OUT/ab.json" 2>&1 | tee -a "$L"
say "ab done"
timeout "$(lim 60)" python3 -m verify_tools.parity --json > "$OUT/parity.json" 2>>"$OUT/parity_err.txt"
echo "parity rc=$?" | tee -a "$L"
python3 -c "import json;d=json.load(open('$OUT/parity.json'));print('parity', d.get('ok'), d.get('summary'))" 2>&1 | tee -a "$L"
say "parity done"
for spec in racecheck:b8_shared_prefix_tree_h16 synccheck:b8_shared_prefix_tree_h16; do
  tool=${spec%%:*}; c=${spec#*:}; t=$(lim 90); [ "$t" -lt 30 ] && { echo "SKIP $spec: budget" | tee -a "$L"; continue; }
  timeout "$t" compute-sanitizer --tool "$tool" --kernel-name kns=mla_verify --print-limit 20 --log-file "$OUT/san_$tool.log" \
    python3 -m verify_tools.parity --cases "$c" --json > "$OUT/san_$tool.out" 2>&1
  echo "$tool rc=$?" | tee -a "$L"; tail -2 "$OUT/san_$tool.log" | tee -a "$L"
done
say done
