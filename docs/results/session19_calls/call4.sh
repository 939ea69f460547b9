#!/usr/bin/env bash
# Session 19, call 4 (ran on branch splitk-s = main + splitk_s.diff; to rerun: git apply docs/results/session19_calls/splitk_s.diff): split-K S in the wgmma kernel (MLAV_SPLITK_S=1): each warpgroup computes
# S for all 64 tokens over half of the 576 dims (18 x m64n64k16 instead of 36 x m64n32k16: 144 KiB of smem operand
# reads per tile instead of 216; call 1's trace put S at ~2,250 of a tile's ~4,500 cycles, the PV phase at ~1,110
# for similar FLOPs), the partials summed through smem (P atom and the tile's rope atom) with two block barriers.
# Base = the same tree with MLAV_SPLITK_S=0 (SASS identical to main 03a1821). Run from the repository root, no
# carry, ~8 min: A/B bf16 and fp8 (both arithmetics), the trace of the new kernel, full parity, sanitizers, pytest.
set -o pipefail
export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16 PYTHONUNBUFFERED=1
R=$PWD; L=$OUT/log.txt; say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a "$L"; }
rm -rf /tmp/base && mkdir -p /tmp/base && cp -r kernels/mla_verify/csrc /tmp/base/csrc
sed -i 's/#define MLAV_SPLITK_S 1/#define MLAV_SPLITK_S 0/' /tmp/base/csrc/mla_verify_wgmma.cuh
grep -c "define MLAV_SPLITK_S 0" /tmp/base/csrc/mla_verify_wgmma.cuh | tee -a "$L"
cd kernels || exit 2
export PYTHONPATH=$PWD:$R
python3 -c "from mla_verify._build import load; load('sm_90a')" >>"$L" 2>&1 &
python3 -c "from verify_tools.bench import load_tree; load_tree('sm_90a', '/tmp/base/csrc')" >>"$L" 2>&1 &
wait; say built
SH=1:4096:8:16,1:32768:8:16,1:131072:8:16,4:131072:4:16,8:32768:8:16,32:8192:8:16,2:16384:8:128
timeout 200 python3 -m verify_tools.bench --tree-ab base=/tmp/base/csrc --ab-kv bf16 --ab-gb-trees none --ab-reps 3 \
  --ab-configs sm90wg --shapes $SH --ab-out "$OUT/ab_bf16.json" >/dev/null 2>>"$L"; echo "ab bf16 rc=$?" | tee -a "$L"
timeout 240 python3 -m verify_tools.bench --tree-ab base=/tmp/base/csrc --ab-kv fp8 --ab-gb-trees none --ab-reps 3 \
  --ab-configs sm90wg --ab-fp8-paths bf16,f16 --shapes $SH --ab-out "$OUT/ab_fp8.json" >/dev/null 2>>"$L"; echo "ab fp8 rc=$?" | tee -a "$L"
for f in ab_bf16 ab_fp8; do python3 - "$OUT/$f.json" <<'PY' 2>&1 | tee -a "$L"
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["ab"]:
    u = r["us"]
    rat = {k.split("/", 1)[1] if "/" in k else "": round(u[k] / u[k.replace("cur", "base", 1)], 4) for k in u if k.startswith("cur")}
    print(f"{d.get('kv')} B={r['B']} L={r['L']} n={r['n']} H={r['H']}: {u} cur/base {rat} bitwise {r.get('bitwise_equal_base')}")
PY
done
cd "$R" || exit 2
timeout 120 python3 tests/device/dense_trace.py 1:32768:8:16,8:32768:8:16 --out "$OUT/trace_splitk.json" 2>>"$L" | grep '^\[trace\]' | tee -a "$L"
cd kernels || exit 2
say parity
timeout 240 python3 -m verify_tools.parity --json --configs all > "$OUT/parity_full.json" 2>>"$L"; echo "parity rc=$?" | tee -a "$L"
python3 -c "import json; d=json.load(open('$OUT/parity_full.json')); print(d.get('summary')); print([(c['name'], c['tile_config'], c['fp8_path']) for c in d['cases'] if not c['ok']])" 2>&1 | tee -a "$L"
for tool in racecheck memcheck; do
  timeout 100 compute-sanitizer --tool $tool --print-limit 4 --log-file /tmp/san.log python3 -m verify_tools.parity --json --configs sm90wg --cases fp8_b4_varlen_tree_h16_u8 > /tmp/san.json 2>/dev/null
  echo "$tool rc=$? | $(grep -v '^=========     ' /tmp/san.log | head -3 | tr '\n' ' ' | cut -c1-300) | $(python3 -c "import json; d=json.load(open('/tmp/san.json')); print([(c['name'], c['fp8_path'], c['ok']) for c in d['cases']])" 2>&1)" | tee -a "$L"
done
(cd "$R" && timeout 150 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_kernel_gpu_parity.py tests/kernels/test_dsa_gpu.py 2>&1 | tail -3) | tee -a "$L"
say done
