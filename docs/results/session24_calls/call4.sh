#!/usr/bin/env bash
# Session 24 call 4 (issue 13): MODE 2's token-split CTAs. Call 1 put MODE 2 at 1.004-1.019x the shipped time where
# every CTA runs the token-split body (B=1 L <= 32k, (4, 32768, 4, 16)), so those CTAs pay something the shipped
# kernel does not: the early issue (Q and tile 0 before the init barrier; session 23: ~0.5 us at B=1 L=4k on the
# shipped kernel) is the suspect. Trees: cur = the checkout with MLAV_WS=3 and MLAV_EARLY_ASYM_ONLY=1 (only ASYM CTAs
# issue early; token-split CTAs in MODE 0's order); m2 = MLAV_WS=3 as measured in call 1; q0 = MLAV_WS=3 with
# MLAV_EARLY_TILE0=0 (only Q early, in every CTA); base = MLAV_WS=1 (shipped). A/B (graph-buffer rows of cur),
# cold-code cost at B=1 4k/8k, full parity of cur, then cur rebuilt with MLAV_ASYM_MIN_TILES=2 (early and late CTAs
# and both bodies mixed in one launch) for racecheck, synccheck and parity. Run from the repository root, ~6 min.
# Ran on b92ec91's sources; both knobs it flips were removed after (5f36841, 1314816), so it does not run on later trees.
set -o pipefail
export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16 PYTHONUNBUFFERED=1
R=$PWD; L=$OUT/log.txt; say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a "$L"; }
C=kernels/mla_verify/csrc
rm -rf /tmp/base /tmp/m2 /tmp/q0 && cp -r $C /tmp/base && cp -r $C /tmp/m2 && cp -r $C /tmp/q0
sed -i 's/#define MLAV_WS 1/#define MLAV_WS 3/' $C/mla_verify.cu /tmp/m2/mla_verify.cu /tmp/q0/mla_verify.cu
sed -i 's/#define MLAV_EARLY_ASYM_ONLY 0/#define MLAV_EARLY_ASYM_ONLY 1/' $C/mla_verify_wgmma_ws.cuh
sed -i 's/#define MLAV_EARLY_TILE0 1/#define MLAV_EARLY_TILE0 0/' /tmp/q0/mla_verify_wgmma_ws.cuh
echo "cur: WS=3 $(grep -c 'define MLAV_WS 3' $C/mla_verify.cu) ASYM_ONLY $(grep -c 'define MLAV_EARLY_ASYM_ONLY 1' $C/mla_verify_wgmma_ws.cuh); q0: $(grep -c 'define MLAV_EARLY_TILE0 0' /tmp/q0/mla_verify_wgmma_ws.cuh)" | tee -a "$L"
export PYTHONPATH=$R/kernels:$R
python3 -c "from mla_verify._build import load; load('sm_90a')" >>"$L" 2>&1 &
for t in /tmp/base /tmp/m2 /tmp/q0; do
  python3 -c "import sys; from verify_tools.bench import load_tree; load_tree('sm_90a', sys.argv[1])" "$t" >>"$L" 2>&1 &
done
wait; say built
cd kernels || exit 2
SH=1:4096:8:16,1:8192:8:16,1:16384:8:16,1:32768:8:16,4:32768:4:16,8:32768:8:16,32:8192:8:16
timeout 240 python3 -m verify_tools.bench --tree-ab base=/tmp/base,m2=/tmp/m2,q0=/tmp/q0 --ab-kv bf16 --ab-gb-trees cur \
  --ab-reps 3 --ab-configs sm90wg --shapes $SH --ab-out "$OUT/ab_bf16.json" >/dev/null 2>>"$L"; echo "ab bf16 rc=$?" | tee -a "$L"
python3 - "$OUT/ab_bf16.json" <<'PY' 2>&1 | tee -a "$L"
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["ab"]:
    print(f"B={r['B']} L={r['L']} n={r['n']} H={r['H']}: {r['us']} over shipped {r.get('ratio_over_base')} bitwise {r.get('bitwise_equal_base')}")
g = [r for r in d["graph_buffer"] if r["tree"] == "cur"]
print("cur graph-buffer", [(r["max_bs"], r["L"], round(r["ratio"], 3)) for r in g], "all bitwise", all(r["replay_equal_exact_bitwise"] for r in g))
PY
say ab
timeout 90 python3 ../tests/device/cold_code.py 1:4096:8:16,1:8192:8:16 --tree base=/tmp/base --tree m2=/tmp/m2 --out "$OUT/cold_code.json" 2>>"$L" | tee -a "$L"
timeout 120 python3 -m verify_tools.parity --json --configs all > "$OUT/parity_full.json" 2>>"$L"; echo "parity rc=$?" | tee -a "$L"
python3 -c "import json; d=json.load(open('$OUT/parity_full.json')); print(d.get('summary'))" 2>&1 | tee -a "$L"
cd "$R" && sed -i 's/#define MLAV_ASYM_MIN_TILES 32/#define MLAV_ASYM_MIN_TILES 2/' $C/mla_verify_wgmma_ws.cuh
python3 -c "from mla_verify._build import load; load('sm_90a')" >>"$L" 2>&1; say "rebuilt, MLAV_ASYM_MIN_TILES=2"
cd kernels || exit 2
for tool in racecheck synccheck; do
  timeout 120 compute-sanitizer --tool $tool --print-limit 8 --log-file /tmp/san.log python3 -m verify_tools.parity --json --configs sm90wg --cases b4_varlen_tree_h16 > /tmp/san.json 2>/dev/null
  echo "$tool rc=$? | $(grep -v '^=========     ' /tmp/san.log | head -6 | tr '\n' ' ' | cut -c1-600) | $(python3 -c "import json; d=json.load(open('/tmp/san.json')); print([(c['name'], c['ok']) for c in d['cases']])" 2>&1 | tail -1)" | tee -a "$L"
done
timeout 120 python3 -m verify_tools.parity --json --configs all > "$OUT/parity_mixed.json" 2>>"$L"; echo "parity (mixed) rc=$?" | tee -a "$L"
python3 -c "import json; d=json.load(open('$OUT/parity_mixed.json')); print(d.get('summary'))" 2>&1 | tee -a "$L"
say done
