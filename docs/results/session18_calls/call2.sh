#!/usr/bin/env bash
# Session 18, call 2 (call 1 ran session 17's call7.sh): the wgmma fp8 kernel's two arithmetics as two kernels, picked on the host per launch (fp8_path
# auto|bf16|f16; auto = f16 when a split holds >= api.FP8_F16_MIN_TILES = 8 prefix tiles). The F16 kernel's SASS is
# session 17's v3 (6,624 instructions, 2 lines ordered differently); the bf16-decode and bf16 kernels are main's
# code through one tile_step lambda (same instruction counts, registers allocated differently), so the A/B also
# runs main's loop written out ("lit", literal_loop.diff: SASS identical to main). Run from the repository root of
# the f16-host checkout with $OUT set (no carry), ~6 min: (1) f16 / bf16 / auto per shape (path_ab.py), (2) fp8
# and bf16 A/B: cur vs lit vs main's csrc (f16_host_csrc.diff reversed), (3) full dense parity incl. both fp8
# paths, (4) memcheck + racecheck on both fp8 paths, (5) the dense + DSA GPU pytest.
set -o pipefail
export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16 PYTHONUNBUFFERED=1
R=$PWD; L=$OUT/log.txt; D=$R/docs/results/session18_calls; say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a "$L"; }
rm -rf /tmp/base /tmp/lit && mkdir -p /tmp/base /tmp/lit
cp -r kernels/mla_verify/csrc /tmp/base/csrc && cp -r kernels/mla_verify/csrc /tmp/lit/csrc
(cd /tmp/base && git apply -R -p3 "$D/f16_host_csrc.diff") 2>>"$L" || { echo "reverse diff failed" | tee -a "$L"; exit 2; }
(cd /tmp/lit && git apply -p3 "$D/literal_loop.diff") 2>>"$L" || { echo "literal diff failed" | tee -a "$L"; exit 2; }
cd kernels || exit 2
export PYTHONPATH=$PWD:$R
python3 -c "from mla_verify._build import load; load('sm_90a')" >>"$L" 2>&1 &
python3 -c "from verify_tools.bench import load_tree; load_tree('sm_90a', '/tmp/base/csrc')" >>"$L" 2>&1 &
python3 -c "from verify_tools.bench import load_tree; load_tree('sm_90a', '/tmp/lit/csrc')" >>"$L" 2>&1 &
wait; say built
timeout 200 python3 "$R/docs/results/session17_calls/path_ab.py" 1:4096:8:16,1:8192:8:16,1:16384:8:16,1:32768:8:16,1:131072:8:16,4:131072:4:16,8:32768:8:16,32:8192:8:16,2:16384:8:128 "$OUT/path_ab.json" 2>>"$L" | tee -a "$L"
for kv in fp8 bf16; do
  timeout 200 python3 -m verify_tools.bench --tree-ab base=/tmp/base/csrc,lit=/tmp/lit/csrc --ab-kv $kv --ab-gb-trees none --ab-reps 3 --ab-configs sm90wg \
    --shapes 1:4096:8:16,1:8192:8:16,1:32768:8:16,4:131072:4:16,8:32768:8:16,32:8192:8:16 --ab-out "$OUT/ab_$kv.json" >/dev/null 2>>"$L"
  echo "ab $kv rc=$?" | tee -a "$L"
  python3 - "$OUT/ab_$kv.json" <<'PY' 2>&1 | tee -a "$L"
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["ab"]:
    print(f"{d['kv']} B={r['B']} L={r['L']} n={r['n']} H={r['H']}: us {r['us']} over base {r.get('ratio_over_base')} bitwise {r.get('bitwise_equal_base')}")
PY
done
say parity
timeout 240 python3 -m verify_tools.parity --json --configs all > "$OUT/parity_full.json" 2>>"$L"; echo "parity rc=$?" | tee -a "$L"
python3 -c "import json; d=json.load(open('$OUT/parity_full.json')); print(d.get('summary')); print([(c['name'], c['tile_config'], c['fp8_path']) for c in d['cases'] if not c['ok']])" 2>&1 | tee -a "$L"
for tool in memcheck racecheck; do
  timeout 120 compute-sanitizer --tool $tool --print-limit 4 --log-file /tmp/san.log python3 -m verify_tools.parity --json --configs sm90wg --cases fp8_b4_varlen_tree_h16_u8 > /tmp/san.json 2>/dev/null
  echo "$tool rc=$? | $(grep -v '^=========     ' /tmp/san.log | head -3 | tr '\n' ' ' | cut -c1-300) | $(python3 -c "import json; d=json.load(open('/tmp/san.json')); print([(c['name'], c['fp8_path'], c['ok']) for c in d['cases']])" 2>&1)" | tee -a "$L"
done
(cd "$R" && timeout 200 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_kernel_gpu_parity.py tests/kernels/test_dsa_gpu.py 2>&1 | tail -3) | tee -a "$L"
say done
