#!/usr/bin/env bash
# Session 21 call 4: the warp-specialized kernel with its mbarriers after the shipped smem layout (the same folded
# 1024-aligned base as the shipped kernel; call 3's Nsight Compute showed +13.6% executed instructions in the
# consumers' softmax phase, address arithmetic recomputed from the unfolded base). Trees: cur = the checkout with
# MLAV_WS=1 (producer 56 / consumers 224 registers), base = the shipped csrc (MLAV_WS=0), ws240 = cur with producer
# 24 / consumers 240. A/B bf16 (graph replays, L2 flushed, min of 3 interleaved medians, outputs compared bitwise
# with base), then the trace of cur and full parity of cur. Run from the repository root, no carry.
set -o pipefail
export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16 PYTHONUNBUFFERED=1
R=$PWD; L=$OUT/log.txt; say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a "$L"; }
rm -rf /tmp/base /tmp/ws240 && mkdir -p /tmp/base /tmp/ws240 && cp -r kernels/mla_verify/csrc /tmp/base/csrc
sed -i 's/#define MLAV_WS 0/#define MLAV_WS 1/' kernels/mla_verify/csrc/mla_verify.cu
cp -r kernels/mla_verify/csrc /tmp/ws240/csrc
sed -i -e 's/setmaxnreg.dec.sync.aligned.u32 56/setmaxnreg.dec.sync.aligned.u32 24/' \
  -e 's/setmaxnreg.inc.sync.aligned.u32 224/setmaxnreg.inc.sync.aligned.u32 240/' /tmp/ws240/csrc/mla_verify_wgmma_ws.cuh
grep -c "u32 240" /tmp/ws240/csrc/mla_verify_wgmma_ws.cuh | tee -a "$L"
export PYTHONPATH=$R/kernels:$R
python3 -c "from mla_verify._build import load; load('sm_90a')" >>"$L" 2>&1 &
for c in /tmp/base/csrc /tmp/ws240/csrc; do
  python3 -c "import sys; from verify_tools.bench import load_tree; load_tree('sm_90a', sys.argv[1])" "$c" >>"$L" 2>&1 &
done
python3 -c "import sys; from verify_tools.bench import load_tree; load_tree('sm_90a', sys.argv[1], extra=['-DMLAV_TRACE=1'])" "$R/kernels/mla_verify/csrc" >>"$L" 2>&1 &
wait; say built
cd kernels || exit 2
SH=1:4096:8:16,1:32768:8:16,1:131072:8:16,4:131072:4:16,8:32768:8:16,32:8192:8:16,2:16384:8:128
timeout 180 python3 -m verify_tools.bench --tree-ab base=/tmp/base/csrc,ws240=/tmp/ws240/csrc --ab-kv bf16 --ab-gb-trees none \
  --ab-reps 3 --ab-configs sm90wg --shapes $SH --ab-out "$OUT/ab_bf16.json" >/dev/null 2>>"$L"; echo "ab bf16 rc=$?" | tee -a "$L"
python3 - "$OUT/ab_bf16.json" <<'PY' 2>&1 | tee -a "$L"
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["ab"]:
    print(f"B={r['B']} L={r['L']} n={r['n']} H={r['H']}: {r['us']} over shipped {r.get('ratio_over_base')} bitwise {r.get('bitwise_equal_base')}")
PY
cd "$R" || exit 2
timeout 100 python3 tests/device/dense_trace.py 8:32768:8:16,1:32768:8:16 --out "$OUT/trace_ws.json" 2>>"$L" | grep '^\[trace\]' | tee -a "$L"
cd kernels || exit 2
timeout 120 python3 -m verify_tools.parity --json --configs all > "$OUT/parity_full.json" 2>>"$L"; echo "parity rc=$?" | tee -a "$L"
python3 -c "import json; d=json.load(open('$OUT/parity_full.json')); print(d.get('summary')); print([(c['name'], c['tile_config'], c['fp8_path']) for c in d['cases'] if not c['ok']])" 2>&1 | tee -a "$L"
say done
