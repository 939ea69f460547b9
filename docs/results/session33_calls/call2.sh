#!/usr/bin/env bash
# Session 33, call 2 (carry .abbase = git archive 7e53b30 kernels/mla_verify/csrc; <= 560 s). The shipped tree (the
# weighted split rule's plumbing at weight 0: two more launch ints, a longer fast-path guard in the device rule) has
# not been sanitized nor timed against the kernel before it. In priority order, each step within what is left:
# 1. tree A/B base (7e53b30) vs cur, bf16, graph replays + graph-buffer rows of both (where the device rule runs);
#    outputs must be bitwise equal (same counts at weight 0). Decides whether the plumbing stays.
# 2. full parity; 3. compute-sanitizer memcheck of a graph-replay case + racecheck of B=1; 4. GPU pytest;
# 5. the phase-2 bench rows (no SGLang: not carried), fp8 included, for this card's SOL and fp8/bf16.
set -o pipefail
export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16 PYTHONUNBUFFERED=1
R=$PWD; L=$OUT/log.txt; START=$(date +%s); DEADLINE=$((START + ${CALL_BUDGET_S:-560}))
left() { echo $((DEADLINE - $(date +%s))); }
say() { echo "== $* ($(date +%T), ${SECONDS}s, left $(left)s)" | tee -a "$L"; }
lim() { local l; l=$(left); [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }
export PYTHONPATH=$R/kernels:$R
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader | tee -a "$L"
rm -rf /tmp/base && cp -r .abbase/kernels/mla_verify/csrc /tmp/base
python3 -c "import sys; from verify_tools.bench import load_tree; load_tree('sm_90a', sys.argv[1])" /tmp/base >>"$L" 2>&1 &
python3 -c "from mla_verify._build import load; load('sm_90a')" >>"$L" 2>&1 || { tail -5 "$L"; exit 3; }
wait; say built
cd kernels || exit 2
timeout "$(lim 200)" python3 -m verify_tools.bench --tree-ab base=/tmp/base --ab-kv bf16 --ab-reps 3 \
  --shapes 1:4096:8:16,1:32768:8:16,1:131072:8:16,4:4096:4:16,4:131072:4:16,8:32768:8:16,32:8192:8:16 \
  --ab-out "$OUT/ab_plumbing.json" >/dev/null 2>>"$OUT/ab_err.txt"
echo "ab rc=$?" | tee -a "$L"
python3 -m verify_tools.bench --ab-summary "$OUT/ab_plumbing.json" 2>&1 | tee -a "$L"
say "ab done"
timeout "$(lim 130)" python3 -m verify_tools.parity --json > "$OUT/parity.json" 2>>"$OUT/parity_err.txt"
echo "parity rc=$?" | tee -a "$L"
python3 -c "import json;d=json.load(open('$OUT/parity.json'));print('parity', d.get('ok'), d.get('summary'))" 2>&1 | tee -a "$L"
say "parity done"
SAN=$OUT/sanitizer.txt
for spec in memcheck:graph_b3_varlen_n4_h16 racecheck:seed_b1_prefix65k_n8_h16_chain; do
  tool=${spec%%:*}; c=${spec#*:}; t=$(lim 110); [ "$t" -lt 30 ] && { echo "SKIP $spec: budget" | tee -a "$L"; continue; }
  echo "### $tool $c" >> "$SAN"
  timeout "$t" compute-sanitizer --tool "$tool" --kernel-name kns=mla_verify --print-limit 20 --log-file "$OUT/san_$tool.txt" \
    python3 -m verify_tools.parity --cases "$c" --json > "$OUT/san_$tool.json" 2>> "$SAN"
  echo "rc=$?" >> "$SAN"; tail -2 "$OUT/san_$tool.txt" >> "$SAN"
  python3 -c "import json;d=json.load(open('$OUT/san_$tool.json'));print('parity under sanitizer ok=',d['ok'])" >> "$SAN" 2>&1
  tail -4 "$SAN" | tee -a "$L"
done
say "sanitizer done"
cd "$R" && timeout "$(lim 60)" python3 -m pytest -q -p no:cacheprovider tests/kernels/test_kernel_gpu_parity.py > "$OUT/pytest.txt" 2>&1
echo "pytest rc=$?" | tee -a "$L"; tail -2 "$OUT/pytest.txt" | tee -a "$L"
cd kernels && timeout "$(lim 200)" python3 -m verify_tools.bench --json --no-sglang --no-flashmla > "$OUT/bench.json" 2>>"$OUT/bench_err.txt"
echo "bench rc=$?" | tee -a "$L"
python3 - "$OUT/bench.json" <<'PY' 2>&1 | tee -a "$L"
import json, sys
d = json.load(open(sys.argv[1]))
print("bench", d.get("ok"), d.get("summary"))
for r in d.get("rows", []):
    print(f"  B{r['B']} L{r['L']} n{r['n']} H{r['H']} {r['new_us']:.1f}us SOL {r['sol_pct']:.1f}% S={r.get('num_splits')} fp8 x{r.get('fp8_over_bf16', 0):.3f}")
PY
say done
