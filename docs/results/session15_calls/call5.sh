#!/usr/bin/env bash
# Session 15 call 5, dense, run at 04c73b0 (the switch was removed after this call: slower): the fp8 L2
# prefetch (MLAV_FP8_L2_PREFETCH=1, set here in the device's copy of the
# checkout: tree "cur") against the same tree with it off (tree "base", a copy made first), fp8 cache, one
# process (bench --tree-ab --ab-kv fp8); dense parity of the prefetch build on every fp8 case incl. the fp8
# graph-replay case; memcheck and racecheck on one fp8 case. Run from the repository root with $OUT set.
set -o pipefail
export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16 PYTHONUNBUFFERED=1
R=$PWD; cd kernels || exit 2
export PYTHONPATH=$PWD:$R
L=$OUT/log.txt; say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a "$L"; }
rm -rf /tmp/base && mkdir -p /tmp/base && cp -r mla_verify/csrc /tmp/base/csrc
sed -i 's/^#define MLAV_FP8_L2_PREFETCH 0$/#define MLAV_FP8_L2_PREFETCH 1/' mla_verify/csrc/mla_verify_wgmma.cuh
grep -c '^#define MLAV_FP8_L2_PREFETCH 1$' mla_verify/csrc/mla_verify_wgmma.cuh | tee -a "$L"
grep -c '^#define MLAV_FP8_L2_PREFETCH 0$' /tmp/base/csrc/mla_verify_wgmma.cuh | tee -a "$L"
python3 -c "from mla_verify._build import load; load('sm_90a')" >>"$L" 2>&1 &
python3 -c "from verify_tools.bench import load_tree; load_tree('sm_90a', '/tmp/base/csrc')" >>"$L" 2>&1 &
wait; say "built"
timeout 200 python3 -m verify_tools.bench --tree-ab base=/tmp/base/csrc --ab-kv fp8 --ab-gb-trees none \
  --shapes 4:131072:4:16,8:32768:8:16,32:8192:8:16,1:32768:8:16,1:4096:8:16,1:131072:8:16 --ab-out "$OUT/ab_fp8.json" >/dev/null 2>>"$L"
echo "ab rc=$?" | tee -a "$L"
python3 - "$OUT/ab_fp8.json" <<'PY' 2>&1 | tee -a "$L"
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["ab"]:
    print(f"fp8 B={r['B']} L={r['L']} n={r['n']} H={r['H']}: us {r['us']} over base {r.get('ratio_over_base')} bitwise {r.get('bitwise_equal_base')}")
for c in d["cupti"]:
    print("cupti", c["tree"], c["B"], c["L"], c["kernels_us"])
PY
say "parity (prefetch build) on the fp8 cases"
timeout 150 python3 -m verify_tools.parity --json --configs all \
  --cases fp8_seed_b1_prefix65k_n8_h16_chain,fp8_b4_varlen_tree_h16_u8,fp8_b2_n16_h128_tree_scales,fp8_b32_chain_n8_h16_prefix1k,fp8_codes_exact,graph_fp8_b2_n8_h16 \
  > "$OUT/parity_fp8.json" 2>>"$L"; echo "parity rc=$?" | tee -a "$L"
python3 -c "
import json; d=json.load(open('$OUT/parity_fp8.json')); print({k: d.get(k) for k in ('ok','summary')})" 2>&1 | tee -a "$L"
say "sanitizers (prefetch build)"
for tool in memcheck racecheck; do
  timeout 120 compute-sanitizer --tool $tool --print-limit 4 --log-file /tmp/san.log python3 -m verify_tools.parity --json --configs sm90wg --cases fp8_b32_chain_n8_h16_prefix1k > /tmp/san.json 2>/dev/null
  echo "$tool rc=$? | $(grep -v '^=========     ' /tmp/san.log | head -3 | tr '\n' ' ' | cut -c1-300)" | tee -a "$L"
done
say done
