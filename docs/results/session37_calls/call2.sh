#!/usr/bin/env bash
# Session 37, call 2 (no carry; <= 330 s). The shipped kernel (f6777e7's csrc) was last benched on an H100 (session
# 33 call 2); issue 13 names the H200. This call refreshes the phase-2 bench rows on whatever card comes (SOL per
# shape, fp8/bf16 on (4, 131072, 4, 16), tree/chain; SGLang and FlashMLA not carried: skipped with their reason) and
# runs the GPU pytest file. No kernel change.
set -o pipefail
export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16 PYTHONUNBUFFERED=1
R=$PWD; L=$OUT/log.txt; START=$(date +%s); DEADLINE=$((START + ${CALL_BUDGET_S:-330}))
left() { echo $((DEADLINE - $(date +%s))); }
say() { echo "== $* ($(date +%T), ${SECONDS}s, left $(left)s)" | tee -a "$L"; }
lim() { local l; l=$(left); [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }
export PYTHONPATH=$R/kernels:$R
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader | tee -a "$L"
python3 -c "from mla_verify._build import load; load('sm_90a')" >>"$L" 2>&1 || { tail -5 "$L"; exit 3; }
say built
cd kernels || exit 2
timeout "$(lim 230)" python3 -m verify_tools.bench --json --no-sglang --no-flashmla > "$OUT/bench.json" 2>>"$OUT/bench_err.txt"
echo "bench rc=$?" | tee -a "$L"
python3 - "$OUT/bench.json" <<'PY' 2>&1 | tee -a "$L"
import json, sys
d = json.load(open(sys.argv[1]))
print("bench", d.get("ok"), d.get("summary"))
for r in d.get("rows", []):
    print(f"  B{r['B']} L{r['L']} n{r['n']} H{r['H']} {r['new_us']:.1f}us SOL {r['sol_pct']:.1f}% S={r.get('num_splits')} fp8 x{r.get('fp8_over_bf16', 0):.3f}")
PY
say "bench done"
cd "$R" && timeout "$(lim 70)" python3 -m pytest -q -p no:cacheprovider tests/kernels/test_kernel_gpu_parity.py > "$OUT/pytest.txt" 2>&1
echo "pytest rc=$?" | tee -a "$L"; tail -2 "$OUT/pytest.txt" | tee -a "$L"
say done
