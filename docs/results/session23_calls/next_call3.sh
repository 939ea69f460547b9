#!/usr/bin/env bash
# Prepared in session 23 (issue 13; compiled, never run); run after next_call1.sh if MODE 2 is the candidate default.
# MODE 2's token-split CTAs pay the early issue (~0.5 us at B=1 L=4k, session 23 call 2's ship_early): before the init
# barrier the producer issues Q, waits one DRAM round trip for tile 0's slot ids and issues tile 0, and the
# consumers' setup after the barrier waits for all of it. MLAV_EARLY_TILE0=0 issues only Q (and starts the slot
# loads) before the barrier, tile 0 after it. Trees: cur = the checkout with MLAV_WS=3 (MODE 2, tile 0 early);
# q0 = the same with MLAV_EARLY_TILE0 0; base = the checkout with MLAV_WS=1 (shipped). A/B at the B=1 lengths and two
# batched shapes (outputs bitwise: the variant changes no arithmetic), cold-code cost of all three. ~4 min.
set -o pipefail
export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16 PYTHONUNBUFFERED=1
R=$PWD; L=$OUT/log.txt; say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a "$L"; }
C=kernels/mla_verify/csrc
rm -rf /tmp/base /tmp/q0 && cp -r $C /tmp/base && cp -r $C /tmp/q0
sed -i 's/#define MLAV_WS 1/#define MLAV_WS 3/' $C/mla_verify.cu /tmp/q0/mla_verify.cu
sed -i 's/#define MLAV_EARLY_TILE0 1/#define MLAV_EARLY_TILE0 0/' /tmp/q0/mla_verify_wgmma_ws.cuh
echo "cur WS=3: $(grep -c 'define MLAV_WS 3' $C/mla_verify.cu), q0 EARLY_TILE0=0: $(grep -c 'define MLAV_EARLY_TILE0 0' /tmp/q0/mla_verify_wgmma_ws.cuh)" | tee -a "$L"
export PYTHONPATH=$R/kernels:$R
python3 -c "from mla_verify._build import load; load('sm_90a')" >>"$L" 2>&1 &
for t in /tmp/base /tmp/q0; do
  python3 -c "import sys; from verify_tools.bench import load_tree; load_tree('sm_90a', sys.argv[1])" "$t" >>"$L" 2>&1 &
done
wait; say built
cd kernels || exit 2
SH=1:4096:8:16,1:8192:8:16,1:16384:8:16,1:32768:8:16,8:32768:8:16,32:8192:8:16
timeout 200 python3 -m verify_tools.bench --tree-ab base=/tmp/base,q0=/tmp/q0 --ab-kv bf16 --ab-gb-trees q0 \
  --ab-reps 3 --ab-configs sm90wg --shapes $SH --ab-out "$OUT/ab_bf16.json" >/dev/null 2>>"$L"; echo "ab bf16 rc=$?" | tee -a "$L"
python3 - "$OUT/ab_bf16.json" <<'PY' 2>&1 | tee -a "$L"
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["ab"]:
    print(f"B={r['B']} L={r['L']} n={r['n']} H={r['H']}: {r['us']} over shipped {r.get('ratio_over_base')} bitwise {r.get('bitwise_equal_base')}")
g = [r for r in d["graph_buffer"] if r["tree"] == "q0"]
print("q0 graph-buffer", [(r["max_bs"], r["L"], round(r["ratio"], 3)) for r in g], "all bitwise", all(r["replay_equal_exact_bitwise"] for r in g))
PY
timeout 90 python3 ../tests/device/cold_code.py 1:4096:8:16,1:8192:8:16 --tree base=/tmp/base --tree q0=/tmp/q0 --out "$OUT/cold_code.json" 2>>"$L" | tee -a "$L"
timeout 60 python3 -m verify_tools.parity --json --configs sm90wg --quick > "$OUT/parity_quick.json" 2>>"$L"; echo "quick parity (cur) rc=$?" | tee -a "$L"
say done
