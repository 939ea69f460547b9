#!/usr/bin/env bash
# Session 23 call 1 = session 22 next_call1.sh + tests/device/cold_code.py (trees: cur = ASYM with the patch, base =
# shipped, comb = 710ddf3's combined kernel, carried as .cache/comb_csrc) + two traces. Prepared in session 22 for the next session's first device call (no device time left): ASYM with its handoffs as
# mbarriers and one call site per barrier (asym_mbar_handoff.patch: p_full / a_free mbarriers in the P atom, which
# ASYM leaves unused; consumer_sync after both branches; compiled: 0 spills, S warpgroup up to R237, shipped SASS
# unchanged; never run). Session 22 call 4's ASYM drew racecheck reports (alpha, row sums) and synccheck "Divergent
# thread(s) in block" on its named-barrier handoffs. Tree cur = the checkout + the patch, built with MLAV_WS=2 (ASYM
# in every CTA); base = the shipped csrc. Order: synccheck and racecheck first (the open question), then the A/B on
# session 22's 7 shapes, full parity, memcheck. Run from the repository root, no carry, ~6 min.
set -o pipefail
export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16 PYTHONUNBUFFERED=1
R=$PWD; L=$OUT/log.txt; say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a "$L"; }
rm -rf /tmp/base && mkdir -p /tmp/base && cp -r kernels/mla_verify/csrc /tmp/base/csrc
(cd kernels/mla_verify/csrc && git apply -p1 "$R/docs/results/session22_calls/asym_mbar_handoff.patch") && echo "patch applied" | tee -a "$L"
sed -i 's/#define MLAV_WS 1/#define MLAV_WS 2/' kernels/mla_verify/csrc/mla_verify.cu
grep -c "define MLAV_WS 2" kernels/mla_verify/csrc/mla_verify.cu | tee -a "$L"
export PYTHONPATH=$R/kernels:$R
python3 -c "from mla_verify._build import load; load('sm_90a')" >>"$L" 2>&1 &
python3 -c "import sys; from verify_tools.bench import load_tree; load_tree('sm_90a', sys.argv[1])" /tmp/base/csrc >>"$L" 2>&1 &
python3 -c "import sys; from verify_tools.bench import load_tree; load_tree('sm_90a', sys.argv[1])" "$R/.cache/comb_csrc" >>"$L" 2>&1 &
wait; say built
cd kernels || exit 2
for tool in synccheck racecheck; do
  timeout 120 compute-sanitizer --tool $tool --print-limit 8 --log-file /tmp/san.log python3 -m verify_tools.parity --json --configs sm90wg --cases b4_varlen_tree_h16 > /tmp/san.json 2>/dev/null
  echo "$tool rc=$? | $(grep -v '^=========     ' /tmp/san.log | head -6 | tr '\n' ' ' | cut -c1-600) | $(python3 -c "import json; d=json.load(open('/tmp/san.json')); print([(c['name'], c['ok']) for c in d['cases']])" 2>&1 | tail -1)" | tee -a "$L"
  cp /tmp/san.log "$OUT/san_$tool.log"
done
SH=1:4096:8:16,1:32768:8:16,1:131072:8:16,4:131072:4:16,8:32768:8:16,32:8192:8:16,2:16384:8:128
timeout 200 python3 -m verify_tools.bench --tree-ab base=/tmp/base/csrc --ab-kv bf16 --ab-gb-trees none \
  --ab-reps 3 --ab-configs sm90wg --shapes $SH --ab-out "$OUT/ab_bf16.json" >/dev/null 2>>"$L"; echo "ab bf16 rc=$?" | tee -a "$L"
python3 - "$OUT/ab_bf16.json" <<'PY' 2>&1 | tee -a "$L"
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["ab"]:
    print(f"B={r['B']} L={r['L']} n={r['n']} H={r['H']}: {r['us']} over shipped {r.get('ratio_over_base')} bitwise {r.get('bitwise_equal_base')}")
PY
timeout 120 python3 ../tests/device/cold_code.py 1:4096:8:16,1:32768:8:16,8:32768:8:16 --tree base=/tmp/base/csrc --tree comb="$R/.cache/comb_csrc" --out "$OUT/cold_code.json" 2>>"$L" | tee -a "$L"
timeout 150 python3 -m verify_tools.parity --json --configs all > "$OUT/parity_full.json" 2>>"$L"; echo "parity rc=$?" | tee -a "$L"
python3 -c "import json; d=json.load(open('$OUT/parity_full.json')); print(d.get('summary'))" 2>&1 | tee -a "$L"
timeout 90 compute-sanitizer --tool memcheck --print-limit 4 --log-file /tmp/san.log python3 -m verify_tools.parity --json --configs sm90wg --cases b4_varlen_tree_h16 > /tmp/san.json 2>/dev/null
echo "memcheck rc=$? | $(grep 'ERROR SUMMARY' /tmp/san.log | head -1)" | tee -a "$L"
timeout 90 python3 ../tests/device/dense_trace.py 8:32768:8:16,1:8192:8:16 --out "$OUT/trace_asym.json" 2>>"$L" | grep "^\[trace\]" | tee -a "$L"
timeout 60 python3 ../tests/device/dense_trace.py 1:8192:8:16 --csrc /tmp/base/csrc --out "$OUT/trace_base.json" 2>>"$L" | grep "^\[trace\]" | tee -a "$L"
say done
