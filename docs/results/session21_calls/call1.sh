#!/usr/bin/env bash
# Prepared in session 20 (compiled for sm_90a here: 0 spills, producer 56 / consumers 224 registers; never run):
# the warp-specialized bf16 kernel (kernels/mla_verify/csrc/mla_verify_wgmma_ws.cuh) against the shipped one. The
# checkout's csrc is switched to MLAV_WS=1 on the device (the copy there is discarded); base = the same csrc with
# MLAV_WS=0. Smoke first (a hang = an mbarrier phase bug: every step has a timeout), then the A/B (graph replays, L2
# flushed, min of 3 interleaved medians; outputs should be bitwise equal: same arithmetic), the trace of both
# kernels, full parity (the sanitizers and GPU pytest: next_call3.sh). Run from the repository root, no carry, ~5 min.
set -o pipefail
export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16 PYTHONUNBUFFERED=1
R=$PWD; L=$OUT/log.txt; say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a "$L"; }
rm -rf /tmp/base && mkdir -p /tmp/base && cp -r kernels/mla_verify/csrc /tmp/base/csrc
sed -i 's/#define MLAV_WS 0/#define MLAV_WS 1/' kernels/mla_verify/csrc/mla_verify.cu
grep -c "define MLAV_WS 1" kernels/mla_verify/csrc/mla_verify.cu | tee -a "$L"
export PYTHONPATH=$R/kernels:$R
python3 -c "from mla_verify._build import load; load('sm_90a')" >>"$L" 2>&1 &
python3 -c "from verify_tools.bench import load_tree; load_tree('sm_90a', '/tmp/base/csrc')" >>"$L" 2>&1 &
for c in "$R/kernels/mla_verify/csrc" /tmp/base/csrc; do
  python3 -c "import sys; from verify_tools.bench import load_tree; load_tree('sm_90a', sys.argv[1], extra=['-DMLAV_TRACE=1'])" "$c" >>"$L" 2>&1 &
done
wait; say built
cd kernels || exit 2
timeout 60 python3 -m verify_tools.parity --json --configs sm90wg --cases b1_prefix0_n4_h16_tree,b4_varlen_tree_h16 > "$OUT/smoke.json" 2>>"$L"
echo "smoke rc=$? $(python3 -c "import json; d=json.load(open('$OUT/smoke.json')); print(d.get('summary'))" 2>&1)" | tee -a "$L"
SH=1:4096:8:16,1:32768:8:16,1:131072:8:16,4:131072:4:16,8:32768:8:16,32:8192:8:16,2:16384:8:128
timeout 150 python3 -m verify_tools.bench --tree-ab base=/tmp/base/csrc --ab-kv bf16 --ab-gb-trees none --ab-reps 3 \
  --ab-configs sm90wg --shapes $SH --ab-out "$OUT/ab_bf16.json" >/dev/null 2>>"$L"; echo "ab bf16 rc=$?" | tee -a "$L"
python3 - "$OUT/ab_bf16.json" <<'PY' 2>&1 | tee -a "$L"
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["ab"]:
    u = r["us"]
    rat = {k: round(u[k] / u[k.replace("cur", "base", 1)], 4) for k in u if k.startswith("cur")}
    print(f"B={r['B']} L={r['L']} n={r['n']} H={r['H']}: {u} ws/base {rat} bitwise {r.get('bitwise_equal_base')}")
PY
cd "$R" || exit 2
timeout 120 python3 tests/device/dense_trace.py 8:32768:8:16,1:32768:8:16 --out "$OUT/trace_ws.json" 2>>"$L" | grep '^\[trace\]' | tee -a "$L"
timeout 120 python3 tests/device/dense_trace.py 8:32768:8:16,1:32768:8:16 --csrc /tmp/base/csrc --out "$OUT/trace_base.json" 2>>"$L" \
  | grep '^\[trace\]' | tee -a "$L"
cd kernels || exit 2
say parity
timeout 120 python3 -m verify_tools.parity --json --configs all > "$OUT/parity_full.json" 2>>"$L"; echo "parity rc=$?" | tee -a "$L"
python3 -c "import json; d=json.load(open('$OUT/parity_full.json')); print(d.get('summary')); print([(c['name'], c['tile_config'], c['fp8_path']) for c in d['cases'] if not c['ok']])" 2>&1 | tee -a "$L"
say done
