#!/usr/bin/env bash
# Session 22 call 2: the asymmetric warp-specialized bf16 kernel (MLAV_WS=2, mla_verify_wgmma_ws.cuh ASYM): warpgroup 0
# runs S for the whole 64-token tile at m64n64k16 (the full-rate shape), the softmax and PV for dims 0..255;
# warpgroup 1 only PV for dims 256..511, handed P(j) (in tile j's dead rope atom) and the row rescale through named
# barriers, so it overlaps S(j+1); the producer warpgroup as shipped. Registers: S 240 / V 208 / producer 56, 0 spills.
# Trees: cur = the checkout with MLAV_WS=2, base = the shipped csrc (MLAV_WS=1), ovl = cur + asym_overlap.patch (the S
# warpgroup issues S(j+1) right behind PV(j), one commit group each, wait_group 1; 0 C7520, 200 B of spills: the
# prologue's S descriptors, 11 LDL.64 per tile). Quick parity first (a hang dies at
# its timeout), then the A/B bf16 (outputs compared bitwise with base), the trace of cur, full parity of cur.
# Run from the repository root, no carry.
set -o pipefail
export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16 PYTHONUNBUFFERED=1
R=$PWD; L=$OUT/log.txt; say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a "$L"; }
rm -rf /tmp/base && mkdir -p /tmp/base && cp -r kernels/mla_verify/csrc /tmp/base/csrc
sed -i 's/#define MLAV_WS 1/#define MLAV_WS 2/' kernels/mla_verify/csrc/mla_verify.cu
grep -c "define MLAV_WS 2" kernels/mla_verify/csrc/mla_verify.cu | tee -a "$L"
rm -rf /tmp/ovl && mkdir -p /tmp/ovl && cp -r kernels/mla_verify/csrc /tmp/ovl/csrc
(cd /tmp/ovl/csrc && git apply -p1 "$R/docs/results/session22_calls/asym_overlap.patch") >>"$L" 2>&1 && echo "ovl: patch applied" | tee -a "$L"
export PYTHONPATH=$R/kernels:$R
python3 -c "from mla_verify._build import load; load('sm_90a')" >>"$L" 2>&1 &
for c in /tmp/base/csrc /tmp/ovl/csrc; do
  python3 -c "import sys; from verify_tools.bench import load_tree; load_tree('sm_90a', sys.argv[1])" "$c" >>"$L" 2>&1 &
done
python3 -c "import sys; from verify_tools.bench import load_tree; load_tree('sm_90a', sys.argv[1], extra=['-DMLAV_TRACE=1'])" "$R/kernels/mla_verify/csrc" >>"$L" 2>&1 &
wait; say built
cd kernels || exit 2
timeout 60 python3 -m verify_tools.parity --json --configs sm90wg --quick > "$OUT/parity_quick.json" 2>>"$L"; echo "quick parity rc=$?" | tee -a "$L"
python3 -c "import json; d=json.load(open('$OUT/parity_quick.json')); print(d.get('summary')); print([c['name'] for c in d['cases'] if not c['ok']])" 2>&1 | tee -a "$L"
SH=1:4096:8:16,1:32768:8:16,1:131072:8:16,4:131072:4:16,8:32768:8:16,32:8192:8:16,2:16384:8:128
timeout 240 python3 -m verify_tools.bench --tree-ab base=/tmp/base/csrc,ovl=/tmp/ovl/csrc --ab-kv bf16 --ab-gb-trees none \
  --ab-reps 3 --ab-configs sm90wg --shapes $SH --ab-out "$OUT/ab_bf16.json" >/dev/null 2>>"$L"; echo "ab bf16 rc=$?" | tee -a "$L"
python3 - "$OUT/ab_bf16.json" <<'PY' 2>&1 | tee -a "$L"
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["ab"]:
    print(f"B={r['B']} L={r['L']} n={r['n']} H={r['H']}: {r['us']} over shipped {r.get('ratio_over_base')} bitwise {r.get('bitwise_equal_base')}")
PY
cd "$R" || exit 2
timeout 100 python3 tests/device/dense_trace.py 8:32768:8:16,1:32768:8:16 --out "$OUT/trace_asym.json" 2>>"$L" | grep '^\[trace\]' | tee -a "$L"
cd kernels || exit 2
timeout 150 python3 -m verify_tools.parity --json --configs all > "$OUT/parity_full.json" 2>>"$L"; echo "parity rc=$?" | tee -a "$L"
python3 -c "import json; d=json.load(open('$OUT/parity_full.json')); print(d.get('summary')); print([(c['name'], c['tile_config'], c['fp8_path']) for c in d['cases'] if not c['ok']])" 2>&1 | tee -a "$L"
say done
