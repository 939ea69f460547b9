#!/usr/bin/env bash
# Session 17 call 4: one wgmma fp8 kernel with both arithmetics (per CTA: f16 wgmmas when its split holds
# >= p.fp8_f16_min_tiles prefix tiles, else the bf16 decode), api fp8_path auto|bf16|f16. (1) f16 vs bf16 per
# shape in one build (the auto threshold), (2) this tree vs main (7a49384, base): bf16 and fp8 auto, (3) full dense
# parity incl. both fp8 paths, (4) memcheck + racecheck on both fp8 paths.
# Run record. Checkout: 7a49384 + merged_fp8_paths.diff; carry .calls: base_csrc (7a49384), path_ab.py.
set -o pipefail
export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16 PYTHONUNBUFFERED=1
R=$PWD; L=$OUT/log.txt; say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a "$L"; }
cd kernels || exit 2
export PYTHONPATH=$PWD:$R
python3 -c "from mla_verify._build import load; load('sm_90a')" >>"$L" 2>&1 &
python3 -c "from verify_tools.bench import load_tree; load_tree('sm_90a', '$R/.calls/base_csrc')" >>"$L" 2>&1 &
wait; say built
timeout 200 python3 $R/.calls/path_ab.py 1:4096:8:16,1:8192:8:16,1:16384:8:16,1:32768:8:16,1:131072:8:16,4:131072:4:16,8:32768:8:16,32:8192:8:16,2:16384:8:128 "$OUT/path_ab.json" 2>>"$L" | tee -a "$L"
echo "path_ab rc=$?" | tee -a "$L"
for kv in bf16 fp8; do
  timeout 150 python3 -m verify_tools.bench --tree-ab base=$R/.calls/base_csrc --ab-kv $kv --ab-gb-trees none --ab-reps 3 --ab-configs sm90wg \
    --shapes 4:131072:4:16,8:32768:8:16,1:32768:8:16,1:4096:8:16 --ab-out "$OUT/ab_$kv.json" >/dev/null 2>>"$L"
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
python3 -c "import json; d=json.load(open('$OUT/parity_full.json')); print(d.get('summary'))" 2>&1 | tee -a "$L"
for tool in memcheck racecheck; do
  timeout 120 compute-sanitizer --tool $tool --print-limit 4 --log-file /tmp/san.log python3 -m verify_tools.parity --json --configs sm90wg --cases fp8_b4_varlen_tree_h16_u8,fp8_seed_b1_prefix65k_n8_h16_chain > /tmp/san.json 2>/dev/null
  echo "$tool rc=$? | $(grep -v '^=========     ' /tmp/san.log | head -3 | tr '\n' ' ' | cut -c1-300) | $(python3 -c "import json; d=json.load(open('/tmp/san.json')); print([(c['name'], c['fp8_path'], c['ok']) for c in d['cases']])")" | tee -a "$L"
done
(cd $R && timeout 200 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_kernel_gpu_parity.py 2>&1 | tail -3) | tee -a "$L"
say done
