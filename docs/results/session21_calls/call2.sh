#!/usr/bin/env bash
# Session 21 call 2: the warp-specialized bf16 kernel with hardware arrivals (cp.async.mbarrier.arrive.noinc), after
# call 1 (= session20_calls/next_call2.sh) measured the first form at 1.13-1.19x the shipped time. Copy /tmp/ws/csrc
# = the checkout's csrc with MLAV_WS=1; cur = the checkout (shipped, MLAV_WS=0). A/B (graph replays, L2 flushed, min
# of 3 interleaved medians; bitwise-equal outputs expected), the trace of both, then the checkout switched to
# MLAV_WS=1 for full parity and memcheck/racecheck/synccheck on one case. Run from the repository root, no carry.
set -o pipefail
export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16 PYTHONUNBUFFERED=1
R=$PWD; L=$OUT/log.txt; say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a "$L"; }
rm -rf /tmp/ws && mkdir -p /tmp/ws && cp -r kernels/mla_verify/csrc /tmp/ws/csrc
sed -i 's/#define MLAV_WS 0/#define MLAV_WS 1/' /tmp/ws/csrc/mla_verify.cu
grep -c "define MLAV_WS 1" /tmp/ws/csrc/mla_verify.cu | tee -a "$L"
export PYTHONPATH=$R/kernels:$R
python3 -c "from mla_verify._build import load; load('sm_90a')" >>"$L" 2>&1 &
python3 -c "from verify_tools.bench import load_tree; load_tree('sm_90a', '/tmp/ws/csrc')" >>"$L" 2>&1 &
for c in "$R/kernels/mla_verify/csrc" /tmp/ws/csrc; do
  python3 -c "import sys; from verify_tools.bench import load_tree; load_tree('sm_90a', sys.argv[1], extra=['-DMLAV_TRACE=1'])" "$c" >>"$L" 2>&1 &
done
wait; say built
cd kernels || exit 2
SH=1:4096:8:16,1:32768:8:16,1:131072:8:16,4:131072:4:16,8:32768:8:16,32:8192:8:16,2:16384:8:128
timeout 150 python3 -m verify_tools.bench --tree-ab ws=/tmp/ws/csrc --ab-kv bf16 --ab-gb-trees none --ab-reps 3 \
  --ab-configs sm90wg --shapes $SH --ab-out "$OUT/ab_bf16.json" >/dev/null 2>>"$L"; echo "ab bf16 rc=$?" | tee -a "$L"
python3 - "$OUT/ab_bf16.json" <<'PY' 2>&1 | tee -a "$L"
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["ab"]:
    u = r["us"]
    print(f"B={r['B']} L={r['L']} n={r['n']} H={r['H']}: {u} ws/cur {round(u['ws'] / u['cur'], 4)} bitwise {r.get('bitwise_equal_base')}")
PY
cd "$R" || exit 2
timeout 100 python3 tests/device/dense_trace.py 8:32768:8:16,1:32768:8:16 --csrc /tmp/ws/csrc --out "$OUT/trace_ws.json" 2>>"$L" | grep '^\[trace\]' | tee -a "$L"
timeout 100 python3 tests/device/dense_trace.py 8:32768:8:16,1:32768:8:16 --out "$OUT/trace_cur.json" 2>>"$L" | grep '^\[trace\]' | tee -a "$L"
sed -i 's/#define MLAV_WS 0/#define MLAV_WS 1/' kernels/mla_verify/csrc/mla_verify.cu
python3 -c "from mla_verify._build import load; load('sm_90a')" >>"$L" 2>&1; say "built ws in the checkout"
cd kernels || exit 2
timeout 120 python3 -m verify_tools.parity --json --configs all > "$OUT/parity_full.json" 2>>"$L"; echo "parity rc=$?" | tee -a "$L"
python3 -c "import json; d=json.load(open('$OUT/parity_full.json')); print(d.get('summary')); print([(c['name'], c['tile_config'], c['fp8_path']) for c in d['cases'] if not c['ok']])" 2>&1 | tee -a "$L"
for tool in memcheck racecheck synccheck; do
  timeout 100 compute-sanitizer --tool $tool --print-limit 4 --log-file /tmp/san.log python3 -m verify_tools.parity --json --configs sm90wg --cases b4_varlen_tree_h16 > /tmp/san.json 2>/dev/null
  echo "$tool rc=$? | $(grep -v '^=========     ' /tmp/san.log | head -3 | tr '\n' ' ' | cut -c1-300) | $(python3 -c "import json; d=json.load(open('/tmp/san.json')); print([(c['name'], c['ok']) for c in d['cases']])" 2>&1)" | tee -a "$L"
done
say done
