#!/usr/bin/env bash
# Device script of the DSA verify kernel (run from the repository root on the GPU machine):
# install the carried wheels (.whl: SGLang 0.5.23 py-only zip + small deps) for SGLang's DSA
# Triton kernel, then build check (sm_90a + sm_120a), parity (all configs, graph replay), bench.
# Usage: bash tests/device/dsa_run.sh [BENCH_BUDGET_S] [parity args...]; results under $OUT.
# DSA_MODE=diag: parity --quick, then the small-T time breakdown and the headline bench shapes.
# DSA_MODE=final: full parity, the bench (BENCH_BUDGET_S, headline shapes first), compute-sanitizer
#   memcheck on the hostile cases (MEMCHECK_CONFIGS, default auto), the small-T breakdown (FINAL_DIAG=0
#   leaves it out).
# DSA_MODE=iter: parity --quick, the breakdown, the headline bench shapes, then the GPU pytest file
#   (tests/kernels/test_dsa_gpu.py, incl. the prebuilt-library build); one summary line per step.
# DSA_MODE=trace: build check, then the per-CTA %globaltimer timeline of the headline shape
#   (dsa_bench --trace: the DSAV_TRACE diagnostic build, JIT; never the shipped library).
# DSA_MODE=dev: build check, parity --quick (every config, graph replay), the trace, the breakdown,
#   the headline bench shapes with ALT_CONFIG (default n8) timed beside auto in the same run.
# DSA_MODE=ab: build check, parity with the given args (no --quick added), the headline bench shapes
#   with each ALT_CONFIG entry (comma-separated, default n8; CFG.COMBINE forces the alt's combine
#   kernel too, e.g. auto.wide) timed beside auto in the same run (no
#   trace, no breakdown). DSA_PYTEST=1 (ab): then the GPU pytest file, as in iter.
# BENCH_SHAPES (ab, final): the bench's --shapes instead of its grid (e.g. only the H=8 headline
#   shapes: the H=64 one runs SGLang's Triton autotune, ~80 s on the H200).
# BENCH_ARGS (ab): more dsa_bench flags for every ALT_CONFIG bench (e.g. --sm120-occupancy).
# .whl-dsa (optional, carried): pydantic_core, which SGLang's kernel modules import.
set -o pipefail
BUDGET=${1:-120}
shift || true
OUT=${OUT:-/tmp/dsa_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
    && python3 -m zipfile -e .whl/sglang-0.5.23-pyonly.zip /tmp/site
fi
if [ -d .whl-dsa ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl-dsa/*.whl
fi
export PYTHONPATH=/tmp/site:$PWD/kernels:$PWD
export ORCHESTRATOR_KERNEL_CACHE=/tmp/dsa_kc
# at most 8 files come back: the steps' stderr is gathered into one err.log on exit
rm -f /tmp/dsa_*.err
trap 'for f in /tmp/dsa_*.err; do [ -f "$f" ] && { echo "== $f"; cat "$f"; }; done > "$OUT/err.log" 2>/dev/null' EXIT
{ git rev-parse HEAD 2>/dev/null || echo "no git"; git status --short 2>/dev/null | head -20
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv 2>&1
} > "$OUT/env.txt"
print_diag() {
  python3 - "$1" <<'PY'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception as e:
    print("diag json unreadable", e); sys.exit(0)
for k, v in d.items():
    if isinstance(v, dict):
        print(f"{k:<28} {v.get('plan', ''):<26} cupti={v.get('s', float('nan'))*1e6:7.2f}us "
              f"sum={v.get('sum_s', float('nan'))*1e6:7.2f}us replay={v.get('replay_s', float('nan'))*1e6:7.2f}us "
              f"{v.get('error', '')[:120]}")
    else:
        print(k, round(v * 1e6, 2), "us")
PY
}
print_bench() {  # the bench's own row printer, also for a partial document left by a timeout
  python3 -c "import json, sys; from verify_tools.dsa_bench import _print_rows; d = json.load(open(sys.argv[1])); _print_rows(d); print('summary', json.dumps(d.get('summary')))" "$1" \
    || echo "bench json unreadable: $1"
}
ab_bench() {  # the headline bench shapes (or BENCH_SHAPES) timed beside auto, same run, once per
  # ALT_CONFIG entry (comma-separated, default n8; CFG.COMBINE, e.g. auto.sliced, also forces the
  # alt's combine kernel: --alt-combine): dsa_bench_<alt>.json each
  local alt cfg comb
  for alt in $(echo "${ALT_CONFIG:-n8}" | tr ',' ' '); do
    cfg=${alt%%.*}; comb=auto; [ "$cfg" != "$alt" ] && comb=${alt#*.}
    timeout "${BENCH_TIMEOUT:-150}" python3 -m verify_tools.dsa_bench --quick ${BENCH_SHAPES:+--shapes "$BENCH_SHAPES"} \
      --reps 20 --budget-s "$BUDGET" --alt-config "$cfg" --alt-combine "$comb" ${BENCH_ARGS:-} \
      --out "$OUT/dsa_bench_$alt.json" 2> "/tmp/dsa_bench_$alt.err"
    echo "bench $alt rc=$?"; grep -v -i "warn" "/tmp/dsa_bench_$alt.err" | tail -8
    print_bench "$OUT/dsa_bench_$alt.json"
  done
}
cd kernels || exit 1
python3 - > "$OUT/dsa_build.json" <<'PY'
import json, shutil
from verify_tools.build_check import dsa_build
print(json.dumps({a: dsa_build(a, shutil.which("nvcc")) for a in ("sm_90a", "sm_120a")}, indent=1))
PY
python3 -c "import json; d=json.load(open('$OUT/dsa_build.json')); print({a: (v['ok'], v['summary']) for a, v in d.items()})"
if [ "${DSA_MODE:-}" = trace ]; then  # per-CTA timeline of the headline shape (DSAV_TRACE build, JIT)
  timeout 150 python3 -m verify_tools.dsa_bench --trace --reps 20 > "$OUT/dsa_trace.json" 2> "/tmp/dsa_trace.err"
  echo "trace rc=$?"; tail -5 "/tmp/dsa_trace.err"; cat "$OUT/dsa_trace.json"
  exit 0
fi
if [ "${DSA_MODE:-}" = diag ] || [ "${DSA_MODE:-}" = iter ] || [ "${DSA_MODE:-}" = dev ]; then set -- --quick "$@"; fi
timeout "${PARITY_TIMEOUT:-300}" python3 -m verify_tools.dsa_parity --json --out "$OUT/dsa_parity.json" "$@" > /dev/null 2> "/tmp/dsa_parity.err"
echo "parity rc=$?"
python3 ../tests/device/dsa_ab.py parity "$OUT/dsa_parity.json"  # summary, SGLang peer, failed entries
tail -5 "/tmp/dsa_parity.err"
if [ "${DSA_MODE:-}" = ab ]; then
  ab_bench
  if [ "${DSA_PYTEST:-}" = 1 ]; then
    cd .. && timeout "${PYTEST_TIMEOUT:-150}" python3 -m pytest -q -m gpu tests/kernels/test_dsa_gpu.py -p no:cacheprovider 2>&1 | tail -8
  fi
  exit 0
fi
if [ "${DSA_MODE:-}" = dev ]; then
  timeout 120 python3 -m verify_tools.dsa_bench --trace --reps 20 > "$OUT/dsa_trace.json" 2> "/tmp/dsa_trace.err"
  echo "trace rc=$?"; tail -3 "/tmp/dsa_trace.err"
  python3 ../tests/device/dsa_ab.py trace "$OUT/dsa_trace.json"
  timeout 90 python3 -m verify_tools.dsa_bench --diag --reps 20 > "$OUT/dsa_diag.json" 2> "/tmp/dsa_diag.err"
  echo "diag rc=$?"; tail -3 "/tmp/dsa_diag.err"
  print_diag "$OUT/dsa_diag.json"
  ab_bench
  exit 0
fi
if [ "${DSA_MODE:-}" = final ]; then
  # bench first (headline shapes first; the JSON is rewritten after every shape), then memcheck, breakdown
  timeout "${BENCH_TIMEOUT:-100}" python3 -m verify_tools.dsa_bench --budget-s "$BUDGET" --reps 20 \
    ${BENCH_SHAPES:+--shapes "$BENCH_SHAPES"} --out "$OUT/dsa_bench.json" 2> "/tmp/dsa_bench.err"
  echo "bench rc=$?"; grep -v -i "warn" "/tmp/dsa_bench.err" | tail -12
  timeout "${MEMCHECK_TIMEOUT:-70}" compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m verify_tools.dsa_parity --json \
    --cases hostile_b2_n4_h16_fp8,hostile_b2_n4_h64_bf16,hostile_b1_n4_h8_bf16,hostile_b1_n4_h8_fp8 \
    --configs "${MEMCHECK_CONFIGS:-auto}" --no-graph --no-peer > "$OUT/dsa_memcheck.json" 2> "/tmp/dsa_memcheck.err"
  echo "memcheck rc=$? (9 = errors found, 124 = timed out)"; grep -hE "ERROR SUMMARY|Invalid" "/tmp/dsa_memcheck.err" "$OUT/dsa_memcheck.json" | head -5
  # the sanitizer writes its banner and summary into stdout around the JSON document
  python3 -c "import json; t=open('$OUT/dsa_memcheck.json').read(); d=json.JSONDecoder().raw_decode(t[t.index('{'):])[0]; print('memcheck parity', d['summary'])" || true
  if [ -d ../.whl-flashmla ]; then  # FlashMLA's sparse kernels as a peer, in a separate process after ours
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/fmsite ../.whl-flashmla/*.whl
    PYTHONPATH=/tmp/fmsite:$PYTHONPATH timeout "${FM_TIMEOUT:-100}" python3 -m verify_tools.dsa_bench --quick --reps 20 \
      --budget-s "${FM_BUDGET:-40}" --out "$OUT/dsa_bench_flashmla.json" 2> "/tmp/dsa_fm.err" > /dev/null
    echo "flashmla bench rc=$?"; grep -v -i "warn" "/tmp/dsa_fm.err" | tail -4
    print_bench "$OUT/dsa_bench_flashmla.json"
  fi
  if [ "${FINAL_DIAG:-1}" = 1 ]; then
    timeout 45 python3 -m verify_tools.dsa_bench --diag --reps 20 > "$OUT/dsa_diag.json" 2> "/tmp/dsa_diag.err"
    print_diag "$OUT/dsa_diag.json"
  fi
  exit 0
fi
if [ "${DSA_MODE:-}" = iter ]; then
  timeout 90 python3 -m verify_tools.dsa_bench --diag > "$OUT/dsa_diag.json" 2> "/tmp/dsa_diag.err"
  echo "diag rc=$?"; tail -3 "/tmp/dsa_diag.err"
  print_diag "$OUT/dsa_diag.json"
  timeout 120 python3 -m verify_tools.dsa_bench --quick --reps 20 --out "$OUT/dsa_bench.json" 2> "/tmp/dsa_bench.err"
  echo "bench rc=$?"; tail -3 "/tmp/dsa_bench.err"
  cd .. && timeout 150 python3 -m pytest -q -m gpu tests/kernels/test_dsa_gpu.py -p no:cacheprovider 2>&1 | tail -8
  exit 0
fi
if [ "${DSA_MODE:-}" = diag ]; then
  timeout 200 python3 -m verify_tools.dsa_bench --diag > "$OUT/dsa_diag.json" 2> "/tmp/dsa_diag.err"
  cat "$OUT/dsa_diag.json"; tail -3 "/tmp/dsa_diag.err"
  timeout 200 python3 -m verify_tools.dsa_bench --quick --out "$OUT/dsa_bench.json" 2> "/tmp/dsa_bench.err"
  exit 0
fi
timeout 400 python3 -m verify_tools.dsa_bench --budget-s "$BUDGET" --out "$OUT/dsa_bench.json" 2> "/tmp/dsa_bench.err"
echo "bench rc=$?"
tail -5 "/tmp/dsa_bench.err"
