#!/usr/bin/env bash
# session 14 call 3: the shipped tree (w64's fp8 kernel = one f16 chain): full parity auto,w64; GPU pytest;
# phases; H=16 A/B w64 vs auto; H>=64 bench with FlashMLA; memcheck/racecheck on w64 fp8
set -o pipefail
R=$PWD; cd kernels
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site $R/.whl-flashmla/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD:$R PYTHONUNBUFFERED=1 ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16
L=$OUT/log.txt; say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a $L; }
python3 -c "from dsa_verify._build import load_trace as f; f('sm_90a')" >>$L 2>&1 &
python3 -c "from dsa_verify._build import load as f; f('sm_90a')" >>$L 2>&1 &
wait; say "built"
timeout 200 python3 -m verify_tools.dsa_parity --json --out $OUT/parity.json --no-peer --configs auto,w64 >/dev/null 2>>$L; echo "parity rc=$?" | tee -a $L
python3 -c "
import json;d=json.load(open('$OUT/parity.json'));print(d.get('summary'))
fp8=[r for r in d['cases'] if r.get('kv')=='fp8' and r.get('rel_fro') is not None]
print('fp8 rel_fro max', max(r['rel_fro'] for r in fp8), 'mismatches', sum(r.get('mismatches') or 0 for r in d['cases']))
[print('FAIL', r) for r in d['cases'] if not r['ok']]" 2>&1 | tee -a $L
say "gpu pytest"
(cd $R && timeout 150 python3 -m pytest -q -m gpu tests/kernels/test_dsa_gpu.py -p no:cacheprovider 2>&1 | tail -2 | tee -a $L)
say "phases"
timeout 100 python3 -m verify_tools.dsa_bench --trace-phases --shapes 32:32768:8:64 --reps 5 --trace-configs w64 > $OUT/phases.json 2>>$L; echo "phases rc=$?" | tee -a $L
python3 -c "
import json;d=json.load(open('$OUT/phases.json'))
for k,v in d.items(): print(k, {kk:(round(vv,2) if isinstance(vv,float) else vv) for kk,vv in v.items() if kk in ('plan','loop_us_per_tile_med','prologue_us_med','setup_us_med','epilogue_us_med','split_end_us','s_cycles_per_tile_med','softmax_pv_issue_cycles_per_tile_med','store_pv_wait_cycles_per_tile_med')})" 2>&1 | tee -a $L
say "bench H>=64 + FlashMLA"
timeout 150 python3 -m verify_tools.dsa_bench --shapes 32:32768:8:64,8:32768:8:128,8:32768:8:64,4:32768:4:64,1:32768:4:64 \
  --reps 20 --no-sglang --out $OUT/bench_h64.json >/dev/null 2>>$L; echo "bench rc=$?" | tee -a $L
python3 -c "import json; from verify_tools.dsa_bench import _print_rows; _print_rows(json.load(open('$OUT/bench_h64.json')))" 2>&1 | tee -a $L
say "ab H=16: w64 vs auto"
timeout 150 python3 -m verify_tools.dsa_bench --shapes 1:32768:4:16,1:32768:8:16,4:32768:4:16,8:32768:8:16,32:32768:8:16 \
  --reps 20 --alt-config w64 --no-sglang --no-flashmla --out $OUT/ab_h16.json >/dev/null 2>>$L; echo "ab rc=$?" | tee -a $L
python3 -c "import json; from verify_tools.dsa_bench import _print_rows; _print_rows(json.load(open('$OUT/ab_h16.json')))" 2>&1 | tee -a $L
say "sanitizers w64"
for spec in memcheck:hostile_b2_n4_h16_fp8 memcheck:fp8_extreme_scales_b2_n4_h8 racecheck:short_prefix_b3_n8_h16_fp8; do
  tool=${spec%%:*}; c=${spec#*:}
  timeout 100 compute-sanitizer --tool $tool --print-limit 4 --log-file /tmp/san.log python3 -m verify_tools.dsa_parity --cases $c --configs w64 --no-graph --no-peer --json > /tmp/san.json 2>/dev/null
  echo "$spec rc=$? $(grep -o '"passed": [0-9]*' /tmp/san.json | head -1) | $(grep -v '^=========     ' /tmp/san.log | head -3 | tr '\n' ' ' | cut -c1-300)" | tee -a $L
done
say done
