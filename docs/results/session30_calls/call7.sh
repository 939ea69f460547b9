#!/usr/bin/env bash
# Session 30, call 7 (carry .abbase; ~3 min): the one shape the combine prefetch slowed (B=4 L=4k n=4 H=16, S=33:
# the grid-stride combine<8, bf16>, 4 partials prefetched; 1.032 / 1.011 on the H100, 1.024 on the H200). Trees:
# base (before the prefetch), j4 (calls 2-6's change), cur (the same, but the grid-stride kernel on bf16 partials
# prefetches none: its old loop, lse values from shared memory; 5 would spill at its 64-register bound).
export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16 PYTHONUNBUFFERED=1
R=$PWD; L=$OUT/log.txt; say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a "$L"; }
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader | tee -a "$L"
export PYTHONPATH=$R/kernels:$R
rm -rf /tmp/base /tmp/j4 && cp -r .abbase/kernels/mla_verify/csrc /tmp/base && cp -r .abbase/j4 /tmp/j4
for t in /tmp/base /tmp/j4; do python3 -c "import sys; from verify_tools.bench import load_tree; load_tree('sm_90a', sys.argv[1])" $t >>"$L" 2>&1 & done
python3 -c "from mla_verify._build import load; load('sm_90a')" >>"$L" 2>&1 &
wait; say built
cd kernels || exit 2
timeout 200 python3 -m verify_tools.bench --tree-ab base=/tmp/base,j4=/tmp/j4 --ab-kv bf16 --ab-gb-trees none --ab-reps 5 \
  --shapes 4:4096:4:16,1:4096:8:16,4:16384:4:16,4:131072:4:16,2:4096:8:16 --ab-out "$OUT/ab_bf16.json" >/dev/null 2>>"$L"
echo "ab bf16 rc=$?" | tee -a "$L"
python3 - "$OUT/ab_bf16.json" <<'PY' 2>&1 | tee -a "$L"
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["ab"]:
    print(f"  B={r['B']} L={r['L']} n={r['n']} H={r['H']}: {r['us']} over base {r['ratio_over_base']} bitwise {r['bitwise_equal_base']}")
for c in d.get("cupti", []):
    print("  cupti", c["tree"], c["B"], c["L"], c["kernels_us"])
PY
say done
