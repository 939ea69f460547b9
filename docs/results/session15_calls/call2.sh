#!/usr/bin/env bash
# Session 15 call 2: w64z with the sigma check moved to the store (voted at the next top barrier, the tile
# redone on the rare path) against w64. Run from the repository root on the device with $OUT set (carry .whl-flashmla).
set -o pipefail
R=$PWD; cd kernels
export PYTHONPATH=$PWD:$R PYTHONUNBUFFERED=1 ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16
L=$OUT/log.txt; say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a $L; }
python3 -c "from dsa_verify._build import load_experimental as f; f('sm_90a')" >>$L 2>&1 &
python3 -c "from dsa_verify._build import load_trace as f; f('sm_90a')" >>$L 2>&1 &
python3 -c "from dsa_verify._build import load as f; f('sm_90a')" >>$L 2>&1 &
wait; say "built"
timeout 150 python3 -m verify_tools.dsa_parity --json --out $OUT/parity.json --no-peer \
  --cases fp8_scale_spikes_b2_n4_h64,fp8_extreme_scales_b2_n4_h8,hostile_b2_n4_h16_fp8,short_prefix_b3_n8_h16_fp8,b2_n4_h128_fp8,b8_n4_h64_fp8,glm5_b1_n4_h8_L32k_fp8,b2_n4_h128_bf16 \
  --configs auto,w64,w64z >/dev/null 2>>$L; echo "parity rc=$?" | tee -a $L
python3 -c "
import json;d=json.load(open('$OUT/parity.json'));print(d.get('summary'))
for r in d['cases']:
  print('OK ' if r['ok'] else 'FAIL', r.get('case'), r.get('config'), {k:v for k,v in r.items() if k in ('rel_fro','rel_fro_block_max','mismatches','token_exact')})" 2>&1 | tee -a $L
say "phases"
timeout 100 python3 -m verify_tools.dsa_bench --trace-phases --shapes 32:32768:8:64,8:32768:8:64 --reps 5 \
  --trace-configs w64,w64z --trace-kv fp8 > $OUT/phases.json 2>>$L; echo "phases rc=$?" | tee -a $L
python3 -c "
import json;d=json.load(open('$OUT/phases.json'))
for k,v in d.items(): print(k, {kk:(round(vv,2) if isinstance(vv,float) else vv) for kk,vv in v.items() if kk in ('plan','loop_us_per_tile_med','setup_us_med','s_cycles_per_tile_med','split_end_us','error')})" 2>&1 | tee -a $L
say "ab w64z"
timeout 200 python3 -m verify_tools.dsa_bench --shapes 32:32768:8:64,8:32768:8:128,8:32768:8:64,4:32768:4:64,1:32768:4:64,8:32768:8:16 \
  --reps 20 --alt-config w64z --no-sglang --out $OUT/ab_w64z.json >/dev/null 2>>$L; echo "ab rc=$?" | tee -a $L
python3 -c "import json; from verify_tools.dsa_bench import _print_rows; _print_rows(json.load(open('$OUT/ab_w64z.json')))" 2>&1 | grep fp8 | tee -a $L
say "sanitizers w64z (the exact step has barriers and a Q reload)"
for spec in memcheck:fp8_scale_spikes_b2_n4_h64 memcheck:hostile_b2_n4_h16_fp8 racecheck:fp8_scale_spikes_b2_n4_h64 synccheck:fp8_scale_spikes_b2_n4_h64; do
  tool=${spec%%:*}; c=${spec#*:}
  timeout 120 compute-sanitizer --tool $tool --print-limit 4 --log-file /tmp/san.log python3 -m verify_tools.dsa_parity --cases $c --configs w64z --no-graph --no-peer --json > /tmp/san.json 2>/dev/null
  echo "$spec rc=$? $(grep -o '"passed": [0-9]*' /tmp/san.json | head -1) | $(grep -v '^=========     ' /tmp/san.log | head -3 | tr '\n' ' ' | cut -c1-300)" | tee -a $L
done
say done
