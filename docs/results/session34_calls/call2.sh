#!/usr/bin/env bash
# Session 34/35, call 2 (carry .abbase .absc; <= 560 s). Call 1 never ran (two refused starts in session 34, which was then cut off); this call holds it; run in session 35.
# Trees, one process, graph replays, L2 flushed, min of interleaved medians:
#   base = HEAD's csrc (the shipped kernel, 7e53b30's); sc = base + session 33's shortcut_first.patch (the device
#   split rule's exact-buffer shortcut first: MODE 0 at B=1); cur = this checkout: ASYM's S warpgroup issues S(j+1)
#   right behind PV(j) (MLAV_ASYM_PIPE=1: the tensor pipe does not drain between them; S(0) issued inside the loop
#   under j == 0: 168 registers, 0 spills, no ptxas C75xx note, as base's).
# Adopt sc if its B=1 exact rows read <= 0.995 of base, its B=1 graph-buffer rows no slower beyond 1-2%, all bitwise.
# Keep cur if its ASYM rows (B x m_tiles >= 16: (8,32k), (32,8k), (4,64k,4,64), (16,32k,4,16)) read <= 0.99 of base,
# the MODE 0 rows unchanged (same code), all bitwise, parity 53/53 + replays bitwise; else MLAV_ASYM_PIPE goes.
# Then on cur: full parity, the bench's tree rows (checks 2d3480e: bench_tree reuses bench_shape's chain replay),
# GPU pytest, memcheck of an ASYM graph-replay case.
set -o pipefail
export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16 PYTHONUNBUFFERED=1
R=$PWD; L=$OUT/log.txt; START=$(date +%s); DEADLINE=$((START + ${CALL_BUDGET_S:-560}))
left() { echo $((DEADLINE - $(date +%s))); }
say() { echo "== $* ($(date +%T), ${SECONDS}s, left $(left)s)" | tee -a "$L"; }
lim() { local l; l=$(left); [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }
export PYTHONPATH=$R/kernels:$R
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader | tee -a "$L"
rm -rf /tmp/base /tmp/sc && cp -r .abbase/kernels/mla_verify/csrc /tmp/base && cp -r .absc/kernels/mla_verify/csrc /tmp/sc
for t in /tmp/base /tmp/sc; do
  python3 -c "import sys; from verify_tools.bench import load_tree; load_tree('sm_90a', sys.argv[1])" $t >>"$L" 2>&1 &
done
python3 -c "from mla_verify._build import load; load('sm_90a')" >>"$L" 2>&1 || { tail -5 "$L"; exit 3; }
wait; say built
cd kernels || exit 2
timeout "$(lim 230)" python3 -m verify_tools.bench --tree-ab base=/tmp/base,sc=/tmp/sc --ab-kv bf16 --ab-reps 3 \
  --ab-gb-trees base,sc \
  --shapes 1:512:8:16,1:4096:8:16,1:32768:8:16,4:4096:4:16,8:32768:8:16,32:8192:8:16,4:65536:4:64,16:32768:4:16 \
  --ab-out "$OUT/ab.json" >/dev/null 2>>"$OUT/ab_err.txt"
echo "ab rc=$?" | tee -a "$L"
python3 -m verify_tools.bench --ab-summary "$OUT/ab.json" 2>&1 | tee -a "$L"
say "ab done"
timeout "$(lim 130)" python3 -m verify_tools.parity --json > "$OUT/parity.json" 2>>"$OUT/parity_err.txt"
echo "parity rc=$?" | tee -a "$L"
python3 -c "import json;d=json.load(open('$OUT/parity.json'));print('parity', d.get('ok'), d.get('summary'))" 2>&1 | tee -a "$L"
say "parity done"
timeout "$(lim 100)" python3 -m verify_tools.bench --shapes 1:4096:8:16,32:8192:8:16 --no-sglang --no-flashmla \
  --no-graph-buffer --json > "$OUT/bench_tree.json" 2>"$OUT/bench_tree_err.txt"
echo "bench tree rc=$?" | tee -a "$L"
python3 -c "import json,sys;d=json.load(open(sys.argv[1]));print('tree rows', [((r['B'],r['L'],r['n'],r['H']), r.get('new_us'), r.get('tree_over_chain')) for r in d.get('rows', [])], 'summary', d.get('summary', {}).get('max_tree_over_chain'))" "$OUT/bench_tree.json" 2>&1 | tee -a "$L"
say "bench tree done"
cd "$R" && timeout "$(lim 60)" python3 -m pytest -q -p no:cacheprovider tests/kernels/test_kernel_gpu_parity.py > "$OUT/pytest.txt" 2>&1
echo "pytest rc=$?" | tee -a "$L"; tail -2 "$OUT/pytest.txt" | tee -a "$L"
cd "$R/kernels" || exit 2
SAN=$OUT/sanitizer.txt
for spec in memcheck:b8_shared_prefix_tree_h16 racecheck:b8_shared_prefix_tree_h16; do
  tool=${spec%%:*}; c=${spec#*:}; t=$(lim 110); [ "$t" -lt 30 ] && { echo "SKIP $spec: budget" | tee -a "$L"; continue; }
  echo "### $tool $c" >> "$SAN"
  timeout "$t" compute-sanitizer --tool "$tool" --kernel-name kns=mla_verify --print-limit 20 --log-file "$OUT/san_$tool.txt" \
    python3 -m verify_tools.parity --cases "$c" --json > "$OUT/san_$tool.json" 2>> "$SAN"
  echo "rc=$?" >> "$SAN"; tail -2 "$OUT/san_$tool.txt" >> "$SAN"
  python3 -c "import json;d=json.load(open('$OUT/san_$tool.json'));print('parity under sanitizer ok=',d['ok'])" >> "$SAN" 2>&1
  tail -4 "$SAN" | tee -a "$L"
done
say done
