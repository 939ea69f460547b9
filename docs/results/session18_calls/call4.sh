#!/usr/bin/env bash
# Session 18, call 4: the F16 fp8 kernel for the mma.sync sm120 config (the config an RTX PRO 6000 runs; on the
# H200 it runs as-is). Same arithmetic as the wgmma F16 kernel (Q rewritten per row by a power of two, one
# cvt.rn.f16x2.e4m3x2 per two values, f16 P and V), one loop with the mma instruction picked per tile; the
# non-F16 kernels' sm_90a SASS is identical to main's. ptxas: 0 spills on sm_90a and sm_120a (the sm90 config's F16
# instance would spill 248 bytes: not built). Threshold tiles.SM120.fp8_f16_min_tokens = 256 is a guess this call
# calibrates. Run from the repository root of the f16-mma checkout with $OUT set (no carry), ~6 min:
# (1) sm120 fp8 A/B, cur vs main's csrc (f16_mma_csrc.diff reversed), fp8_path bf16 and f16 (base runs its bf16
# decode under both), (2) full dense parity (both fp8 paths on sm120 and sm90wg), (3) memcheck + racecheck on
# sm120 both paths, (4) dense + DSA GPU pytest.
set -o pipefail
export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16 PYTHONUNBUFFERED=1
R=$PWD; L=$OUT/log.txt; D=$R/docs/results/session18_calls; say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a "$L"; }
rm -rf /tmp/base && mkdir -p /tmp/base && cp -r kernels/mla_verify/csrc /tmp/base/csrc
(cd /tmp/base && git apply -R -p3 "$D/f16_mma_csrc.diff") 2>>"$L" || { echo "reverse diff failed" | tee -a "$L"; exit 2; }
cd kernels || exit 2
export PYTHONPATH=$PWD:$R
python3 -c "from mla_verify._build import load; load('sm_90a')" >>"$L" 2>&1 &
python3 -c "from verify_tools.bench import load_tree; load_tree('sm_90a', '/tmp/base/csrc')" >>"$L" 2>&1 &
wait; say built
timeout 260 python3 -m verify_tools.bench --tree-ab base=/tmp/base/csrc --ab-kv fp8 --ab-gb-trees none --ab-reps 3 --ab-configs sm120 \
  --ab-fp8-paths bf16,f16 --shapes 1:4096:8:16,1:8192:8:16,1:16384:8:16,1:32768:8:16,1:131072:8:16,4:131072:4:16,8:32768:8:16,32:8192:8:16 \
  --ab-out "$OUT/ab_sm120_fp8_paths.json" >/dev/null 2>>"$L"
echo "ab rc=$?" | tee -a "$L"
python3 - "$OUT/ab_sm120_fp8_paths.json" <<'PY' 2>&1 | tee -a "$L"
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["ab"]:
    us = r["us"]
    print(f"B={r['B']} L={r['L']} n={r['n']} H={r['H']}: {us} f16/bf16 {us['cur/f16'] / us['cur/bf16']:.4f} "
          f"bf16 over base {r['ratio_over_base']['cur/bf16']} bitwise {r['bitwise_equal_base']['cur/bf16']}")
PY
say parity
timeout 300 python3 -m verify_tools.parity --json --configs all > "$OUT/parity_full.json" 2>>"$L"; echo "parity rc=$?" | tee -a "$L"
python3 -c "import json; d=json.load(open('$OUT/parity_full.json')); print(d.get('summary')); print([(c['name'], c['tile_config'], c['fp8_path']) for c in d['cases'] if not c['ok']])" 2>&1 | tee -a "$L"
for tool in memcheck racecheck; do
  timeout 150 compute-sanitizer --tool $tool --print-limit 4 --log-file /tmp/san.log python3 -m verify_tools.parity --json --configs sm120 --cases fp8_b4_varlen_tree_h16_u8 > /tmp/san.json 2>/dev/null
  echo "$tool rc=$? | $(grep -v '^=========     ' /tmp/san.log | head -3 | tr '\n' ' ' | cut -c1-300) | $(python3 -c "import json; d=json.load(open('/tmp/san.json')); print([(c['name'], c['fp8_path'], c['ok']) for c in d['cases']])" 2>&1)" | tee -a "$L"
done
(cd "$R" && timeout 200 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_kernel_gpu_parity.py tests/kernels/test_dsa_gpu.py 2>&1 | tail -3) | tee -a "$L"
say done
