#!/usr/bin/env bash
# Session 22 call 3: the ASYM kernel (forced: MLAV_WS=2 in the checkout; base = the shipped csrc, MLAV_WS=1) where it
# crosses over (call 2: 1.11x at B=1 L=4k with one tile per split, 1.006 at B=1 L=32k with 8, 0.92-0.94 with 32-64):
# A/B bf16 on shapes with 2-16 tiles per split, with the graph-buffer rows of cur; then the three sanitizers on
# b4_varlen_tree_h16 and the GPU pytest, every bf16 call on the ASYM kernel. Run from the repository root, no carry.
set -o pipefail
export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16 PYTHONUNBUFFERED=1
R=$PWD; L=$OUT/log.txt; say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a "$L"; }
rm -rf /tmp/base && mkdir -p /tmp/base && cp -r kernels/mla_verify/csrc /tmp/base/csrc
sed -i 's/#define MLAV_WS 1/#define MLAV_WS 2/' kernels/mla_verify/csrc/mla_verify.cu
grep -c "define MLAV_WS 2" kernels/mla_verify/csrc/mla_verify.cu | tee -a "$L"
export PYTHONPATH=$R/kernels:$R
python3 -c "from mla_verify._build import load; load('sm_90a')" >>"$L" 2>&1 &
python3 -c "import sys; from verify_tools.bench import load_tree; load_tree('sm_90a', sys.argv[1])" /tmp/base/csrc >>"$L" 2>&1 &
wait; say built
cd kernels || exit 2
SH=1:8192:8:16,1:16384:8:16,1:65536:8:16,4:8192:8:16,8:8192:8:16,2:32768:8:16,4:32768:4:16
timeout 240 python3 -m verify_tools.bench --tree-ab base=/tmp/base/csrc --ab-kv bf16 --ab-gb-trees cur \
  --ab-reps 3 --ab-configs sm90wg --shapes $SH --ab-out "$OUT/ab_bf16.json" >/dev/null 2>>"$L"; echo "ab bf16 rc=$?" | tee -a "$L"
python3 - "$OUT/ab_bf16.json" <<'PY' 2>&1 | tee -a "$L"
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["ab"]:
    print(f"B={r['B']} L={r['L']} n={r['n']} H={r['H']}: {r['us']} over shipped {r.get('ratio_over_base')} bitwise {r.get('bitwise_equal_base')}")
g = [r for r in d["graph_buffer"] if r["tree"] == "cur"]
print("cur graph-buffer", [(r["max_bs"], r["L"], round(r["ratio"], 3)) for r in g], "all bitwise", all(r["replay_equal_exact_bitwise"] for r in g))
PY
say "ab done"
for tool in memcheck racecheck synccheck; do
  timeout 150 compute-sanitizer --tool $tool --print-limit 4 --log-file /tmp/san.log python3 -m verify_tools.parity --json --configs sm90wg --cases b4_varlen_tree_h16 > /tmp/san.json 2>/dev/null
  echo "$tool rc=$? | $(grep -v '^=========     ' /tmp/san.log | head -3 | tr '\n' ' ' | cut -c1-300) | $(python3 -c "import json; d=json.load(open('/tmp/san.json')); print([(c['name'], c['ok']) for c in d['cases']])" 2>&1)" | tee -a "$L"
done
cd "$R" || exit 2
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_kernel_gpu_parity.py tests/kernels/test_dsa_gpu.py 2>&1 | tail -3 | tee -a "$L"
say done
