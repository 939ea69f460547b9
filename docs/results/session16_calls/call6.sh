#!/usr/bin/env bash
# Session 16 call 6 (carry .calls/base16 = git archive 26a0269 kernels/mla_verify/csrc): the wgmma kernel's fp8
# path in f16 (one cvt.rn.f16x2.e4m3x2 per two values instead of the five-instruction bf16 decode; Q rewritten as
# f16 x 2^e[r] for the prefix tiles, back to bf16 for the draft tile; f16 P) as tree "cur" against 26a0269 "base":
# A/B fp8 (sm90wg) on 6 shapes, full dense parity, fp8 GPU pytest, racecheck + memcheck of one fp8 case on
# sm90wg (the bf16 kernel's SASS has the same instructions as 26a0269's, registers renamed: not timed here).
# The kernel change it measured is docs/results/session16_calls/call6_f16_path.diff (git apply, then run this).
set -o pipefail
export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16 PYTHONUNBUFFERED=1
R=$PWD; L=$OUT/log.txt; say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a "$L"; }
cd kernels || exit 2
export PYTHONPATH=$PWD:$R
B=$R/.calls/base16/kernels/mla_verify/csrc
python3 -c "from mla_verify._build import load; load('sm_90a')" >>"$L" 2>&1 &
python3 -c "from verify_tools.bench import load_tree; load_tree('sm_90a', '$B')" >>"$L" 2>&1 &
wait; say built
pab() { python3 - "$1" <<'PY' 2>&1 | tee -a "$L"
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["ab"]:
    print(f"B={r['B']} L={r['L']} n={r['n']} H={r['H']}: us {r['us']} over base {r.get('ratio_over_base')} bitwise {r.get('bitwise_equal_base')}")
PY
}
timeout 150 python3 -m verify_tools.bench --tree-ab base=$B --ab-kv fp8 --ab-gb-trees none --ab-reps 3 --ab-configs sm90wg \
  --shapes 4:131072:4:16,8:32768:8:16,32:8192:8:16,1:32768:8:16,1:4096:8:16,2:16384:4:128 --ab-out "$OUT/ab_fp8.json" >/dev/null 2>>"$L"
echo "ab fp8 rc=$?" | tee -a "$L"; pab "$OUT/ab_fp8.json"
say parity
timeout 150 python3 -m verify_tools.parity --json --configs all > $OUT/parity_dense.json 2>/dev/null; echo "dense parity rc=$?" | tee -a "$L"
python3 -c "
import json; d=json.load(open('$OUT/parity_dense.json')); print(d.get('summary'))
for c in d.get('cases', []) + d.get('graph_replays', []):
    if not c.get('ok', True): print('FAIL', str(c)[:400])" 2>&1 | tee -a "$L"
say pytest
(cd $R && timeout 90 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_kernel_gpu_parity.py -k "fp8 or rising" 2>&1 | tail -4) | tee -a "$L"
say sanitizers
for tool in racecheck memcheck; do
  timeout 80 compute-sanitizer --tool $tool --print-limit 4 --log-file /tmp/san.log python3 -m verify_tools.parity --json --configs sm90wg --cases fp8_b4_varlen_tree_h16_u8 > /tmp/san.json 2>/dev/null
  echo "$tool rc=$? | $(grep -v '^=========     ' /tmp/san.log | head -3 | tr '\n' ' ' | cut -c1-300) | parity ok=$(python3 -c "import json; print(json.load(open('/tmp/san.json')).get('ok'))" 2>&1)" | tee -a "$L"
done
say done
