#!/usr/bin/env bash
# Prepared in session 36, not run (after its one call, refused starts spent the device budget). No carry; <= 400 s.
# The checkout's csrc is base (f6777e7's, the shipped kernel); the script applies e3.patch to the device's copy.
# E3 (MLAV_ASYM_PIPE=1): the ASYM S warpgroup issues S(j+1) right behind PV(j) only when tile j+1 has already landed
# (mbarrier test_wait, voted over its 128 threads); otherwise it waits for PV(j) and frees stage j first, as base
# does. Session 35's E1/E2 waited for tile j+1 before freeing stage j (1.05-1.18x base's time on the ASYM rows: the
# refill of stage j then starts only once tile j+1 has landed). Trees: base = the checkout's csrc, cur = base +
# e3.patch. Keep E3 (commit the patch) if its ASYM rows read <= 0.99 of base, the B=1 rows (MODE 0, same code)
# unchanged, all bitwise, parity + replays pass, racecheck/synccheck clean; else drop the patch.
set -o pipefail
export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16 PYTHONUNBUFFERED=1
R=$PWD; L=$OUT/log.txt; START=$(date +%s); DEADLINE=$((START + ${CALL_BUDGET_S:-400}))
left() { echo $((DEADLINE - $(date +%s))); }
say() { echo "== $* ($(date +%T), ${SECONDS}s, left $(left)s)" | tee -a "$L"; }
lim() { local l; l=$(left); [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }
export PYTHONPATH=$R/kernels:$R
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader | tee -a "$L"
rm -rf /tmp/base && cp -r kernels/mla_verify/csrc /tmp/base
P=docs/results/session36_calls/e3.patch
git apply "$P" 2>>"$L" || patch -p1 <"$P" >>"$L" 2>&1 || { echo "e3.patch did not apply" | tee -a "$L"; exit 4; }
grep -q "define MLAV_ASYM_PIPE 1" kernels/mla_verify/csrc/mla_verify_wgmma_ws.cuh || { echo "E3 not in the tree" | tee -a "$L"; exit 4; }
python3 -c "import sys; from verify_tools.bench import load_tree; load_tree('sm_90a', sys.argv[1])" /tmp/base >>"$L" 2>&1 &
python3 -c "from mla_verify._build import load; load('sm_90a')" >>"$L" 2>&1 || { tail -5 "$L"; exit 3; }
wait; say built
cd kernels || exit 2
timeout "$(lim 200)" python3 -m verify_tools.bench --tree-ab base=/tmp/base --ab-kv bf16 --ab-reps 3 \
  --ab-gb-trees cur \
  --shapes 1:4096:8:16,1:32768:8:16,8:32768:8:16,32:8192:8:16,4:65536:4:64,16:32768:4:16,2:16384:8:128 \
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
