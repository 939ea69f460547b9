#!/usr/bin/env bash
# Prepared in session 27 (no device was lent that session); run after session26_calls/next_call1.sh, no carry. ~7 min.
# The fp8 cache through the warp-specialized kernel (-DMLAV_WS_FP8=1, commit 2e401fb; compiled with 0 spills, never
# run): its producer lands each fp8 prefix row in its bf16 row's back half and decodes it in place, the consumers are
# the bf16 ones with k_scale / v_scale folded in. Trees: base (the checkout: fp8 calls on mla_verify_wgmma.cuh's fp8
# kernel) and wsfp8 (MLAV_WS_FP8=1), timed with an fp8 cache (graph replays: the bf16-decode arithmetic, fp8_f16 = 0).
# Then wsfp8 in the working tree: full parity (the fp8 cases on every config, graph replays), GPU pytest, the bench's
# own fp8 / bf16 ratio in one process on the memory-floored and batched shapes, memcheck on the fp8 cases (uint8
# storage, distinct scales, every e4m3 code, B=32, and the fp8 graph case's in-place rewrites; NaN-poisoned unused
# slots in each), racecheck on one MODE 0 (fp8_b4_varlen_tree_h16_u8: 4 CTAs per split) and one ASYM
# (fp8_b32_chain_n8_h16_prefix1k: 64 CTAs per split) case.
# Decision: parity 100% (fp8 cases token-exact, fp8_codes_exact bitwise), sanitizers clean, and wsfp8 / base < 1 on
# the batched and long shapes -> MLAV_WS_FP8 1 the default (then the next call: phase 2's bench, call4.sh). A loss at
# B=1 short lengths alone does not block it (the F16 kernel still serves long eager splits); record the numbers either way.
set -o pipefail
export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16 PYTHONUNBUFFERED=1
R=$PWD; L=$OUT/log.txt; say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a "$L"; }
C=kernels/mla_verify/csrc
rm -rf /tmp/base /tmp/wsfp8 && cp -r $C /tmp/base && cp -r $C /tmp/wsfp8
for d in /tmp/wsfp8 $C; do sed -i 's/^#define MLAV_WS_FP8 0$/#define MLAV_WS_FP8 1/' $d/mla_verify.cu; done
echo "wsfp8 $(grep -c '^#define MLAV_WS_FP8 1$' /tmp/wsfp8/mla_verify.cu $C/mla_verify.cu | tr '\n' ' ')" | tee -a "$L"
export PYTHONPATH=$R/kernels:$R
for t in /tmp/base /tmp/wsfp8; do
  python3 -c "import sys; from verify_tools.bench import load_tree; load_tree('sm_90a', sys.argv[1])" "$t" >>"$L" 2>&1 &
done
python3 -c "from mla_verify._build import load; load('sm_90a')" >>"$L" 2>&1 &
wait; say built
cd kernels || exit 2
SH=1:4096:8:16,1:32768:8:16,1:131072:8:16,4:131072:4:16,4:32768:4:16,8:2048:8:16,8:32768:8:16,32:8192:8:16,2:16384:8:128
timeout 200 python3 -m verify_tools.bench --tree-ab base=/tmp/base,wsfp8=/tmp/wsfp8 --ab-kv fp8 --ab-reps 3 \
  --ab-configs sm90wg --shapes $SH --ab-out "$OUT/ab_fp8.json" >/dev/null 2>>"$L"
echo "ab rc=$?" | tee -a "$L"
python3 - "$OUT/ab_fp8.json" <<'PY' 2>&1 | tee -a "$L"
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["ab"]:
    print(f"B={r['B']} L={r['L']} n={r['n']} H={r['H']}: {r['us']} over base {r.get('ratio_over_base')} bitwise {r.get('bitwise_equal_base')}")
PY
say ab
timeout 120 python3 -m verify_tools.parity --json --configs all > "$OUT/parity_wsfp8.json" 2>>"$L"; echo "parity rc=$?" | tee -a "$L"
python3 -c "import json; d=json.load(open('$OUT/parity_wsfp8.json')); print(d.get('summary'))" 2>&1 | tee -a "$L"
(cd "$R" && timeout 60 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_kernel_gpu_parity.py 2>&1 | tail -2 | tee -a "$L")
say parity
timeout 150 python3 -m verify_tools.bench --json --no-sglang --no-flashmla --no-graph-buffer --fp8 \
  --shapes 4:131072:4:16,8:32768:8:16,32:8192:8:16,1:32768:8:16 > "$OUT/bench_wsfp8.json" 2>>"$L"
echo "bench rc=$?" | tee -a "$L"
python3 - "$OUT/bench_wsfp8.json" <<'PY' 2>&1 | tee -a "$L"
import json, sys
d = json.load(open(sys.argv[1]))
for r in d.get("rows", d.get("shapes", [])):
    print(r["B"], r["L"], r["n"], r["H"], "bf16", round(r["new_us"], 1), "fp8", round(r.get("fp8_us", float("nan")), 1),
          "fp8/bf16", round(r.get("fp8_over_bf16", float("nan")), 3), "paths", r.get("fp8_paths_us"))
print(json.dumps(d.get("summary")))
PY
say bench
FP8C=fp8_b4_varlen_tree_h16_u8,fp8_b2_n16_h128_tree_scales,fp8_b32_chain_n8_h16_prefix1k,fp8_codes_exact,graph_fp8_b2_n8_h16
timeout 120 compute-sanitizer --tool memcheck --print-limit 8 --log-file "$OUT/san_memcheck.log" python3 -m verify_tools.parity --json \
  --configs sm90wg --cases $FP8C > /tmp/m.json 2>/dev/null
echo "memcheck rc=$? | $(grep -v '^=========     ' "$OUT/san_memcheck.log" | tail -3 | tr '\n' ' ' | cut -c1-400)" | tee -a "$L"
timeout 150 compute-sanitizer --tool racecheck --print-limit 8 --log-file "$OUT/san_racecheck.log" python3 -m verify_tools.parity --json \
  --configs sm90wg --cases fp8_b4_varlen_tree_h16_u8,fp8_b32_chain_n8_h16_prefix1k > /tmp/r.json 2>/dev/null
echo "racecheck rc=$? | $(grep -v '^=========     ' "$OUT/san_racecheck.log" | head -6 | tr '\n' ' ' | cut -c1-600)" | tee -a "$L"
say done
