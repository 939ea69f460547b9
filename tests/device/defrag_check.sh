#!/usr/bin/env bash
# KV-cache defrag on one H200 (run from the repo root; python3 with CUDA torch). One call, < 4 min.
# `bash tests/device/defrag_check.sh stall`: only the live hook's scheduler-thread stall (below).
#   1. --validate bf16 on 1M slots x as many of 61 layers as fit 60% of free memory
#      (61 x 1,048,577 x 1152 B = 70 GiB on a 139 GiB H200): every live token checked in every layer;
#   2. --validate fp8 (uint8 storage) on 1M slots x 8 layers;
#   3. --bench: relocation vs copy bandwidth, planner time 1k..1M slots, verify-kernel gain.
# Writes $OUT/defrag_validate.json, defrag_validate_fp8.json, defrag_bench.json and *.log.
set -u -o pipefail
OUT=${OUT:-/tmp/defrag-out}; mkdir -p "$OUT"
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 MAX_JOBS=16 ORCHESTRATOR_KERNEL_CACHE=${ORCHESTRATOR_KERNEL_CACHE:-/tmp/mlav-cache}
say() { echo "== $* ($(date +%T))"; }
if [ "${1:-}" = stall ]; then
  # The live hook's stall on the scheduler thread (sglang_verify_plugin.defrag_gpu_check --stall):
  # real sglang 0.5.23 structures on CUDA, the same seeded scheduler-step loop without and with the
  # hook; p50/p99 inter-step time, the hook's own time per try (planning vs copy), every token read
  # back. Carry .whl, .whl-plugin, .whl-pydantic. Writes $OUT/defrag_stall_<slots>.json. < 2.5 min.
  for d in .whl .whl-plugin .whl-pydantic; do
    ls "$d"/*.whl >/dev/null 2>&1 && $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
      --upgrade --target /tmp/site "$d"/*.whl >>"$OUT/sglang_install.log" 2>&1
  done
  [ -f .whl/sglang-0.5.23-pyonly.zip ] && $PY -m zipfile -e .whl/sglang-0.5.23-pyonly.zip /tmp/site >>"$OUT/sglang_install.log" 2>&1
  export PYTHONPATH=/tmp/site:$PWD/kernels:$PWD
  say "host: $(nvidia-smi -L 2>&1 | head -1); commit $(git rev-parse --short HEAD 2>/dev/null)"
  for spec in ${STALL_SPECS:-"1048576:8:75" "200000:8:35"}; do  # slots:layers:time limit
    IFS=: read -r slots layers lim <<<"$spec"
    say "stall: $slots slots x $layers layers"
    timeout "$lim" $PY tests/integration/with_sgl_kernel_shim.py sglang_verify_plugin.defrag_gpu_check --stall --json \
      --slots "$slots" --layers "$layers" --steps "${STALL_STEPS:-400}" > "$OUT/defrag_stall_$slots.json" 2> "$OUT/defrag_stall_$slots.log"
    echo "rc=$?"; $PY -c "import json,sys; d=json.load(open(sys.argv[1])); print(json.dumps(d.get('summary') or d, indent=1))" "$OUT/defrag_stall_$slots.json" 2>&1 | head -60
    tail -3 "$OUT/defrag_stall_$slots.log"
  done
  exit 0
fi
# sglang (optional): reuse the tree tests/device/kernel_run.sh unpacks, or unpack it from .whl/ the same way
if [ -d /tmp/site/sglang ]; then export PYTHONPATH=/tmp/site:$PWD/kernels:$PWD
elif [ -d .whl ]; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl >"$OUT/sglang_install.log" 2>&1
  [ -f .whl/sglang-0.5.23-pyonly.zip ] && $PY -m zipfile -e .whl/sglang-0.5.23-pyonly.zip /tmp/site >>"$OUT/sglang_install.log" 2>&1
  export PYTHONPATH=/tmp/site:$PWD/kernels:$PWD
else export PYTHONPATH=$PWD/kernels:$PWD; fi
say "host: $(nvidia-smi -L 2>&1 | head -1); commit $(git rev-parse --short HEAD 2>/dev/null)"
$PY -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, 'free GiB', round(torch.cuda.mem_get_info()[0]/2**30,1))"
SLOTS=1048576

say "validate bf16: $SLOTS slots, layers to fit --mem-frac 0.6"
timeout 75 $PY -m kv_defrag --validate --json --slots $SLOTS --mem-frac 0.6 \
  > "$OUT/defrag_validate.json" 2> "$OUT/defrag_validate.log"; echo "rc=$?"; tail -4 "$OUT/defrag_validate.log"

say "validate fp8 (uint8): $SLOTS slots x 8 layers, P=64"
timeout 35 $PY -m kv_defrag --validate --json --slots $SLOTS --layers 8 --dtype fp8 --min-run 64 \
  > "$OUT/defrag_validate_fp8.json" 2> "$OUT/defrag_validate_fp8.log"; echo "rc=$?"

# The bundled kernel JIT-builds on first use; build it here with its own time limit so a slow
# build cannot eat the bench (the bench then uses the torch fallback and says why).
VERIFY=auto
say "bundled kernel build (cached in $ORCHESTRATOR_KERNEL_CACHE)"
if ! timeout 50 $PY -c "from mla_verify._build import load; load('sm_90a')" > "$OUT/defrag_kbuild.log" 2>&1; then
  echo "bundled kernel build failed or timed out (see defrag_kbuild.log): bench uses --verify torch"; VERIFY=torch
fi

say "bench: $SLOTS slots"
timeout 110 $PY -m kv_defrag --bench --json --slots $SLOTS --verify $VERIFY \
  > "$OUT/defrag_bench.json" 2> "$OUT/defrag_bench.log"; echo "rc=$?"; tail -6 "$OUT/defrag_bench.log"

say "summary"
$PY - "$OUT" <<'PYEOF'
import json, sys, os
out = sys.argv[1]
def load(name):
    try:
        return json.load(open(os.path.join(out, name)))
    except Exception as e:
        return {"ok": None, "error": f"{name}: {e}"}
for name in ("defrag_validate.json", "defrag_validate_fp8.json"):
    d = load(name); s = d.get("summary", {}); c = d.get("config", {})
    print(f"{name}: ok={d.get('ok')} lost_tokens={s.get('lost_tokens')} consistent={s.get('consistent')} "
          f"slots={s.get('slots')} layers={s.get('layers')} dtype={c.get('dtype')} backend={c.get('backend')} "
          f"moved={s.get('tokens_moved')} tokens / {s.get('bytes_moved', 0)/1e9:.1f} GB staged={s.get('staged_tokens')} "
          f"planner_ms={s.get('planner_ms')} runs/req {s.get('frag_before', {}).get('runs_per_request', 0):.1f}"
          f" -> {s.get('frag_after', {}).get('runs_per_request', 0):.2f} {d.get('error', '') or d.get('blocked', '')}")
d = load("defrag_bench.json"); s = d.get("summary", {})
print(f"defrag_bench.json: ok={d.get('ok')} {d.get('error', '') or d.get('blocked', '')}")
for k in ("relocation_bw_ratio", "relocation_backend", "relocation_bw_gbs", "copy_bw_gbs", "gain_pct", "verify_impl",
          "t_frag_us", "t_defrag_us", "sglang_gain_pct", "planner_ms_by_slots"):
    print(f"  {k}: {s.get(k)}")
for k, v in d.get("relocation", {}).items():
    print(f"  relocation[{k}]: {v}")
v = d.get("verify", {})
for k in ("bundled_fallback_reason", "sglang_skipped"):
    if k in v:
        print(f"  {k}: {v[k]}")
PYEOF
