#!/usr/bin/env bash
# Prepared in session 24 for the next session's first device call (compiled, never run; run prep_next.sh first and
# carry .cache/m2_noshfl). Session 24 found MODE 2's (per-CTA) ASYM CTAs ~4% slower than the ASYM kernel's with the
# same instructions (calls 1 and 3): ptxas scheduled the S loop differently because the per-CTA choice (w.ntiles,
# from memory) was not provably warp-uniform, so the branch around the wgmma bodies got convergence handling (BSSY).
# Taking the choice from lane 0 through __shfl_sync makes 1,785 of the loop's 2,050 instructions align in order with
# MODE 1's (was 1,332); MODE 0 and MODE 1 SASS unchanged. Trees: cur = the checkout with MLAV_WS=3 (MODE 2 + shuffle);
# m2old = 4b3ffb7's MODE 2 (.cache/m2_noshfl); asym = MLAV_WS=2 (MODE 1); base = MLAV_WS=1 (shipped). A/B with cur's
# graph-buffer rows, the trace of cur vs MODE 1 at B=8 L=32k, full parity and the dense GPU pytest on cur, then cur
# rebuilt with MLAV_ASYM_MIN_TILES=2 (both bodies in one launch) for racecheck, synccheck, memcheck and parity. If cur
# keeps MODE 1's batched gain (0.938-0.945) at <= 1.02 elsewhere with graph-buffer rows <= 1.1, make MLAV_WS=3 the
# default and raise phase 2's gates (phases/2-microbench.yaml, plans/0002). ~7 min.
set -o pipefail
export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16 PYTHONUNBUFFERED=1
R=$PWD; L=$OUT/log.txt; say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a "$L"; }
C=kernels/mla_verify/csrc
rm -rf /tmp/base /tmp/asym && cp -r $C /tmp/base && cp -r $C /tmp/asym
sed -i 's/#define MLAV_WS 1/#define MLAV_WS 2/' /tmp/asym/mla_verify.cu
sed -i 's/#define MLAV_WS 1/#define MLAV_WS 3/' $C/mla_verify.cu
echo "cur WS=3: $(grep -c 'define MLAV_WS 3' $C/mla_verify.cu), shuffle: $(grep -c '__shfl_sync(0xffffffffu, static_cast<int>(w.ntiles' $C/mla_verify_wgmma_ws.cuh), m2old WS=3: $(grep -c 'define MLAV_WS 3' "$R/.cache/m2_noshfl/mla_verify.cu")" | tee -a "$L"
export PYTHONPATH=$R/kernels:$R
python3 -c "from mla_verify._build import load; load('sm_90a')" >>"$L" 2>&1 &
for t in /tmp/base /tmp/asym "$R/.cache/m2_noshfl"; do
  python3 -c "import sys; from verify_tools.bench import load_tree; load_tree('sm_90a', sys.argv[1])" "$t" >>"$L" 2>&1 &
done
wait; say built
cd kernels || exit 2
SH=1:4096:8:16,1:16384:8:16,1:32768:8:16,1:131072:8:16,4:131072:4:16,8:32768:8:16,32:8192:8:16,2:16384:8:128,4:32768:4:16
timeout 240 python3 -m verify_tools.bench --tree-ab base=/tmp/base,asym=/tmp/asym,m2old="$R/.cache/m2_noshfl" --ab-kv bf16 \
  --ab-gb-trees cur --ab-reps 3 --ab-configs sm90wg --shapes $SH --ab-out "$OUT/ab_bf16.json" >/dev/null 2>>"$L"
echo "ab bf16 rc=$?" | tee -a "$L"
python3 - "$OUT/ab_bf16.json" <<'PY' 2>&1 | tee -a "$L"
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["ab"]:
    print(f"B={r['B']} L={r['L']} n={r['n']} H={r['H']}: {r['us']} over shipped {r.get('ratio_over_base')} bitwise {r.get('bitwise_equal_base')}")
g = [r for r in d["graph_buffer"] if r["tree"] == "cur"]
print("cur graph-buffer", [(r["max_bs"], r["L"], round(r["ratio"], 3)) for r in g], "all bitwise", all(r["replay_equal_exact_bitwise"] for r in g))
PY
say ab
for ws in 2 3; do
  timeout 80 python3 ../tests/device/dense_trace.py 8:32768:8:16 --define MLAV_WS=$ws --out "$OUT/trace_ws$ws.json" 2>>"$L" | grep "^\[trace\]" | sed "s/^/WS=$ws /" | tee -a "$L"
done
timeout 120 python3 -m verify_tools.parity --json --configs all > "$OUT/parity_full.json" 2>>"$L"; echo "parity rc=$?" | tee -a "$L"
python3 -c "import json; d=json.load(open('$OUT/parity_full.json')); print(d.get('summary'))" 2>&1 | tee -a "$L"
(cd "$R" && timeout 100 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_kernel_gpu_parity.py 2>&1 | tail -2 | tee -a "$L")
cd "$R" && sed -i 's/#define MLAV_ASYM_MIN_TILES 32/#define MLAV_ASYM_MIN_TILES 2/' $C/mla_verify_wgmma_ws.cuh
grep -c "define MLAV_ASYM_MIN_TILES 2" $C/mla_verify_wgmma_ws.cuh | tee -a "$L"
python3 -c "from mla_verify._build import load; load('sm_90a')" >>"$L" 2>&1; say "rebuilt, MLAV_ASYM_MIN_TILES=2"
cd kernels || exit 2
for tool in racecheck synccheck memcheck; do
  timeout 120 compute-sanitizer --tool $tool --print-limit 8 --log-file /tmp/san.log python3 -m verify_tools.parity --json --configs sm90wg --cases b4_varlen_tree_h16 > /tmp/san.json 2>/dev/null
  echo "$tool rc=$? | $(grep -v '^=========     ' /tmp/san.log | head -6 | tr '\n' ' ' | cut -c1-600) | $(python3 -c "import json; d=json.load(open('/tmp/san.json')); print([(c['name'], c['ok']) for c in d['cases']])" 2>&1 | tail -1)" | tee -a "$L"
  cp /tmp/san.log "$OUT/san_$tool.log"
done
timeout 120 python3 -m verify_tools.parity --json --configs all > "$OUT/parity_mixed.json" 2>>"$L"; echo "parity (mixed bodies) rc=$?" | tee -a "$L"
python3 -c "import json; d=json.load(open('$OUT/parity_mixed.json')); print(d.get('summary'))" 2>&1 | tee -a "$L"
say done
