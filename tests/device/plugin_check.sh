#!/usr/bin/env bash
# On the H200 (device tool), from the repo root: the SGLang plugin's verify path against SGLang's
# own extend_attention_fwd on the parity cases, on SGLang-built metadata (plugin_gpu_check.py).
# Writes $OUT/plugin_gpu.json (+ plugin_gpu.log). Run with carry [".whl", ".whl-plugin"]:
#   .whl         sglang 0.5.23 Python tree + small deps (the kernel engineer's set)
#   .whl-plugin  what TritonAttnBackend and SGLang's MLA test kit import beyond that:
#                apache-tvm-ffi compressed-tensors gguf openai uvicorn fastapi opentelemetry-api
#                httpx2 httpcore2 truststore (openai's HTTP stack; absent from the device image)
#   .whl-pydantic (optional, carry it too) pydantic 2.14.4, pydantic_core 2.50.5, annotated_types,
#                typing_inspection, typing_extensions: absent from the device image, sglang imports them
# sgl_kernel (373 MB) is not carried: tests/integration/sgl_kernel_import_shim.py serves its
# import names and raises if anything calls into it. Usage: bash tests/device/plugin_check.sh [quick|full|prebuilt|graph]
#
# graph (same carry): the bundled kernel through SGLang's own TritonAttnBackend CUDA-graph path
# for target verify (plugin_graph_path_check.py: one runner sized for the largest context,
# init_cuda_graph_state, capture per batch size with out_graph(in_capture=True) + in_graph +
# forward_extend, replay at several real lengths after in-place rewrites and out_graph replay
# prep), token-exact vs SGLang's extend_attention_fwd and timed vs the exact-length call.
# Writes $OUT/plugin_graph_path.json + plugin_gpu.log. GRAPH_ARGS overrides the script's args.
#
# prebuilt (no carry needed; KERNELS_DIR=<a frozen copy of kernels/> optional): phase 0's
# ahead-of-time library build (verify_tools.build_check --library), then service-like processes
# timed from launch to their first verify call: 8 at once on the prebuilt library (the plugin's
# own preflight, prebuilt-only mode), 1 on it, then 1 and 8 at once on today's first-call JIT
# (fresh cache each). Writes $OUT/{library,prebuilt8,prebuilt1,jit1,jit8}.json + prebuilt.log.
set -o pipefail
MODE=${1:-full}
if [ "$MODE" = prebuilt ]; then
  OUT=${OUT:-/tmp/plugin-gpu-out}; mkdir -p "$OUT"; LOG="$OUT/prebuilt.log"
  export PYTHONUNBUFFERED=1 MAX_JOBS=16
  ROOT=$PWD; K=${KERNELS_DIR:-kernels}; cd "$K" || exit 2
  START=$(date +%s); DEADLINE=$((START + ${PREBUILT_BUDGET_S:-230}))
  left() { echo $((DEADLINE - $(date +%s))); }
  step() {  # step NAME LIMIT CMD...
    local n=$1 lim=$2; shift 2; local l; l=$(left); [ "$l" -lt "$lim" ] && lim=$l
    if [ "$lim" -lt 15 ]; then echo "SKIP $n: budget" | tee -a "$LOG"; return; fi
    echo "== $n (limit ${lim}s, t=$(( $(date +%s) - START ))s)" | tee -a "$LOG"
    timeout "$lim" "$@" > "$OUT/$n.json" 2>>"$LOG"; echo "$n rc=$?" | tee -a "$LOG"
    head -c 1500 "$OUT/$n.json" | tee -a "$LOG"; echo | tee -a "$LOG"
  }
  echo "== $(nvidia-smi -L 2>&1 | head -1); $(python3 -c 'import torch;print("torch",torch.__version__)'); $(nvcc --version | tail -1)" | tee -a "$LOG"
  T="$ROOT/tests/integration/first_verify_timing.py"
  step library 150 python3 -m verify_tools.build_check --arch sm_90a --library --json
  step prebuilt8 60 python3 "$T" --mode prebuilt --procs 8 --timeout 55
  step prebuilt1 40 python3 "$T" --mode prebuilt --procs 1 --timeout 35
  step jit1 150 python3 "$T" --mode jit --procs 1 --cache "$(mktemp -d)" --timeout 145
  step jit8 150 python3 "$T" --mode jit --procs 8 --cache "$(mktemp -d)" --timeout 145
  exit 0
fi
OUT=${OUT:-/tmp/plugin-gpu-out}; mkdir -p "$OUT"
LOG="$OUT/plugin_gpu.log"
export PYTHONUNBUFFERED=1 ORCHESTRATOR_KERNEL_CACHE=${ORCHESTRATOR_KERNEL_CACHE:-/tmp/mlav-cache}
SITE=/tmp/site-plugin
mkdir -p "$SITE"
for d in .whl .whl-plugin .whl-pydantic; do
  if ls "$d"/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$d"/*.whl >>"$LOG" 2>&1 \
      || echo "pip install of $d failed (see log)" | tee -a "$LOG"
  fi
done
if [ -f .whl/sglang-0.5.23-pyonly.zip ]; then python3 -m zipfile -e .whl/sglang-0.5.23-pyonly.zip "$SITE" >>"$LOG" 2>&1; fi
export PYTHONPATH="$SITE:$PWD/kernels:$PWD:$PWD/tests/integration"
echo "== $(nvidia-smi -L 2>&1 | head -1); commit $(git rev-parse --short HEAD 2>/dev/null); mode $MODE" | tee -a "$LOG"
# The plugin only LOADS the prebuilt library (register() = prebuilt-only, as in a service): build
# it first, exactly as phase 0 does (verify_tools.build_check --library), into kernels/build/.
(cd kernels && timeout 300 python3 -m verify_tools.build_check --arch sm_90a --library --json > "$OUT/library.json" 2>>"$LOG")
echo "library build rc=$? $(python3 -c 'import json,sys;d=json.load(open(sys.argv[1]));l=d.get("library",{});print("built",l.get("built"),"loadable",l.get("loadable"),"sha256",l.get("sha256"),"s",l.get("build_seconds"))' "$OUT/library.json" 2>&1)" | tee -a "$LOG"
if [ "$MODE" = graph ]; then
  # shellcheck disable=SC2086  # GRAPH_ARGS is a word list on purpose
  timeout "${GRAPH_TIMEOUT_S:-240}" python3 tests/integration/plugin_graph_path_check.py --json \
    --out "$OUT/plugin_graph_path.json" ${GRAPH_ARGS:---mixed --budget-s 170} > "$OUT/plugin_graph_path.stdout" 2>>"$LOG"
  rc=$?
  echo "plugin_graph_path_check rc=$rc" | tee -a "$LOG"
  python3 - "$OUT/plugin_graph_path.json" <<'PY' 2>&1 | tee -a "$LOG"
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception as e:
    print("no JSON:", e); sys.exit(0)
print("ok", d.get("ok"), "blocked", d.get("blocked"), d.get("device"), "sglang", d.get("sglang_version"), d.get("seconds"), "s")
print("setup", d.get("setup"))
for e in d.get("capture_errors", []):
    print("  capture ERROR", e)
print("summary", d.get("summary"))
for c in d.get("cases", []):
    if "error" in c:
        print(f"  B={c.get('B')} L={c.get('prefix_lens')} ERROR {c['error']} {c.get('traceback', '')[-600:]}")
    else:
        print(f"  B={c['B']} L={c['prefix_lens'][:4]} ok={c['ok']} tok={c['token_mismatches_graph_vs_sglang']}"
              f" ties={c['near_ties_graph_vs_sglang']} direct={c['replay_equal_direct_bundled_on_graph_metadata']}"
              f" ratio(g/exact-g)={c.get('ratio_replay_vs_exact_graph', 0):.3f} ratio(g/eager)={c.get('ratio_replay_vs_exact_eager', 0):.3f}"
              f" S grid/eff/exact={c.get('splits_graph_launch')}/{c.get('splits_effective_replay')}/{c.get('splits_exact_length')}"
              f" bitwise(g,eager)={c.get('graph_equal_eager_bitwise')}"
              f" ms replay={c.get('graph_replay_ms', 0):.4f} exact_g={c.get('exact_length_graph_ms', 0):.4f}"
              f" eager={c.get('exact_length_eager_ms', 0):.4f} sglang={c.get('sglang_eager_ms', 0):.4f}"
              f" rel(g,s)={c['rel_err_graph_vs_sglang']:.2e} {c['seconds']}s")
PY
  exit $rc
fi
ARGS="--json --out $OUT/plugin_gpu.json"
[ "$MODE" = quick ] && ARGS="$ARGS --quick"
timeout 540 python3 tests/integration/plugin_gpu_check.py $ARGS > "$OUT/plugin_gpu.stdout" 2>>"$LOG"
rc=$?
echo "plugin_gpu_check rc=$rc" | tee -a "$LOG"
python3 - "$OUT/plugin_gpu.json" <<'PY' 2>&1 | tee -a "$LOG"
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception as e:
    print("no JSON:", e); sys.exit(0)
print("ok", d.get("ok"), "blocked", d.get("blocked"), d.get("device"), "sglang", d.get("sglang_version"))
print("summary", d.get("summary"))
for c in d.get("cases", []):
    if "error" in c:
        print(f"  {c['name']:<36} ERROR {c['error']}")
    else:
        print(f"  {c['name']:<36} ok={c['ok']} bundled={c['ran_bundled_kernel']} tok={c['token_mismatches_vs_sglang']}"
              f" ties={c['near_ties_vs_sglang']} rel(p,s)={c['rel_err_plugin_vs_sglang']:.2e}"
              f" rel(p,o)={c['rel_err_plugin_vs_oracle']:.2e} rel(s,o)={c['rel_err_sglang_vs_oracle']:.2e}"
              f" graph={c.get('graph_replay_equal', '-')} {c['seconds']}s")
for s in d.get("skipped", []):
    print(f"  skipped {s['name']}: {s['reason']}")
PY
exit $rc
