#!/usr/bin/env bash
# Session 20, call 4: the bf16 wgmma kernel with tile j+1's cp.async rows issued between thirds of S(j)'s wgmma chain
# (MLAV_S_INTERLEAVE=1) against the same tree with 0 (the shipped order: all loads after the chain's commit; SASS of
# the fp8 kernels identical). Call 3's trace: S 2,276 cycles per tile with the gather, 1,844 without (B=8 L=32k).
# A/B bf16 (graph replays, L2 flushed, min of 3 interleaved medians), the new kernel's trace, full parity, memcheck.
# Run from the repository root, no carry, ~3 min. Ran at 2fd798a (the macro was removed after: SASS identical, 1 = shipped);
# to rerun, check out 2fd798a.
set -o pipefail
export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16 PYTHONUNBUFFERED=1
R=$PWD; L=$OUT/log.txt; say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a "$L"; }
rm -rf /tmp/base && mkdir -p /tmp/base && cp -r kernels/mla_verify/csrc /tmp/base/csrc
sed -i 's/#define MLAV_S_INTERLEAVE 1/#define MLAV_S_INTERLEAVE 0/' /tmp/base/csrc/mla_verify_wgmma.cuh
grep -c "define MLAV_S_INTERLEAVE 0" /tmp/base/csrc/mla_verify_wgmma.cuh | tee -a "$L"
export PYTHONPATH=$R/kernels:$R
python3 -c "from mla_verify._build import load; load('sm_90a')" >>"$L" 2>&1 &
python3 -c "from verify_tools.bench import load_tree; load_tree('sm_90a', '/tmp/base/csrc')" >>"$L" 2>&1 &
python3 -c "from verify_tools.bench import load_tree; load_tree('sm_90a', '$R/kernels/mla_verify/csrc', extra=['-DMLAV_TRACE=1'])" >>"$L" 2>&1 &
wait; say built
cd kernels || exit 2
SH=1:4096:8:16,1:32768:8:16,1:131072:8:16,4:131072:4:16,8:32768:8:16,32:8192:8:16,2:16384:8:128
timeout 120 python3 -m verify_tools.bench --tree-ab base=/tmp/base/csrc --ab-kv bf16 --ab-gb-trees none --ab-reps 3 \
  --ab-configs sm90wg --shapes $SH --ab-out "$OUT/ab_bf16.json" >/dev/null 2>>"$L"; echo "ab bf16 rc=$?" | tee -a "$L"
python3 - "$OUT/ab_bf16.json" <<'PY' 2>&1 | tee -a "$L"
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["ab"]:
    u = r["us"]
    rat = {k: round(u[k] / u[k.replace("cur", "base", 1)], 4) for k in u if k.startswith("cur")}
    print(f"B={r['B']} L={r['L']} n={r['n']} H={r['H']}: {u} cur/base {rat} bitwise {r.get('bitwise_equal_base')}")
PY
cd "$R" || exit 2
timeout 60 python3 tests/device/dense_trace.py 8:32768:8:16 --out "$OUT/trace_interleave.json" 2>>"$L" | grep '^\[trace\]' | tee -a "$L"
cd kernels || exit 2
say parity
timeout 100 python3 -m verify_tools.parity --json --configs all > "$OUT/parity_full.json" 2>>"$L"; echo "parity rc=$?" | tee -a "$L"
python3 -c "import json; d=json.load(open('$OUT/parity_full.json')); print(d.get('summary')); print([(c['name'], c['tile_config'], c['fp8_path']) for c in d['cases'] if not c['ok']])" 2>&1 | tee -a "$L"
say memcheck
timeout 60 compute-sanitizer --tool memcheck --print-limit 4 --log-file /tmp/san.log python3 -m verify_tools.parity --json --configs sm90wg --cases b4_varlen_tree_h16 > /tmp/san.json 2>/dev/null
echo "memcheck rc=$? | $(grep -v '^=========     ' /tmp/san.log | head -3 | tr '\n' ' ' | cut -c1-300) | $(python3 -c "import json; d=json.load(open('/tmp/san.json')); print([(c['name'], c['ok']) for c in d['cases']])" 2>&1)" | tee -a "$L"
say done
