#!/usr/bin/env bash
# One GPU session on the device machine: build check, parity, bench (+plot), compute-sanitizer.
# Usage: bash tests/device/kernel_run.sh quick|full|final|dev|splits|graph|gs  (writes JSON/logs/PNG under $OUT)
#   gs: one call for a combine change (deadline GS_DEADLINE s, default 230): JIT builds of this tree and
#       of .v6base (carried: git archive <commit> kernels/mla_verify/csrc | tar -x -C .v6base), the full
#       parity suite, the GPU pytest file, bench graph-buffer mode (12 rows), bench --tree-ab cur/base
#       (B=1 + loop-bound shapes, graph-buffer rows of both, CUPTI), racecheck while time is left.
#       GS_TREES=name=csrc_dir,... (carried, ignored folders): more trees, built alongside and in the A/B
#       with their graph-buffer rows.
#   dev: quick parity cases, B=1 sweep + anchors without SGLang, memcheck of one small case.
#   splits: small parity, then the B=1 split counts of the v3 rule against the current one, same run.
#   graph: parity of the CUDA-graph replay cases (in-place rewrites, device-side split count) + 5
#          cases, bench graph-buffer mode + 4 anchor shapes without SGLang, memcheck of a graph case.
set -o pipefail
MODE=${1:-quick}
OUT=${OUT:-/tmp/mlav-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 MAX_JOBS=16 ORCHESTRATOR_KERNEL_CACHE=/tmp/mlav-cache
export PYTHONPATH=$PWD/kernels${PYTHONPATH:+:$PYTHONPATH}  # the host tools import from kernels/ (the bundle root)
LOG="$OUT/log.txt"
say() { echo "== $* ($(date +%T))" | tee -a "$LOG"; }
# sanitize TIMEOUT_S TOOL:CASE...: parity of one case under compute-sanitizer per spec, all appended
# to $OUT/sanitizer.txt (tool log, exit code, whether parity still passed under the tool).
sanitize() {
  local lim=$1 spec tool c SAN="$OUT/sanitizer.txt"; shift
  for spec in "$@"; do
    tool=${spec%%:*}; c=${spec#*:}
    echo "### $tool $c" >> "$SAN"
    timeout "$lim" compute-sanitizer --tool "$tool" --kernel-name kns=mla_verify --print-limit 20 \
      --log-file "$OUT/san_tool.txt" python3 -m verify_tools.parity --cases "$c" --json > "$OUT/san_tmp.json" 2>> "$SAN"
    echo "rc=$?" >> "$SAN"
    cat "$OUT/san_tool.txt" >> "$SAN"; rm -f "$OUT/san_tool.txt"
    python3 -c "import json;d=json.load(open('$OUT/san_tmp.json'));print('parity under sanitizer ok=',d['ok'])" >> "$SAN" 2>&1
    tail -3 "$SAN" | tee -a "$LOG"
  done
  rm -f "$OUT/san_tmp.json"
}
say "host: $(nvidia-smi -L 2>&1 | head -1); mode $MODE; commit $(git rev-parse --short HEAD 2>/dev/null)"
if [ "$MODE" = gs ]; then SKIP_BUILD_CHECK=${SKIP_BUILD_CHECK:-"gs: build_check ran on the host (sm_90a + sm_120a)"}; fi
# SGLang 0.5.23 python tree + small pure-Python deps, carried in .whl/
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl >>"$LOG" 2>&1
  python3 -m zipfile -e .whl/sglang-0.5.23-pyonly.zip /tmp/site >>"$LOG" 2>&1
  export PYTHONPATH=/tmp/site:$PWD/kernels:$PWD
fi
ARCH=$(python3 -c "import torch; from mla_verify._build import arch_for_capability as f; print(f(*torch.cuda.get_device_capability()))")
if [ -n "$SKIP_BUILD_CHECK" ]; then say "build check skipped: SKIP_BUILD_CHECK=$SKIP_BUILD_CHECK"; else
say "build check $ARCH (nvcc)"
python3 -m verify_tools.build_check --arch "$ARCH" --json > "$OUT/build_${ARCH/_/}.json" 2>>"$LOG"; echo "rc=$?" | tee -a "$LOG"; fi
say "JIT build of the extension"
if [ "$MODE" = gs ]; then  # the base tree (and GS_TREES) build alongside
  for d in .v6base/kernels/mla_verify/csrc $(echo "${GS_TREES:-}" | tr ',' '\n' | sed 's/^[^=]*=//'); do
    [ -d "$d" ] && python3 -c "import torch; from verify_tools.bench import load_tree; load_tree('$ARCH', '$d')" >>"$LOG" 2>&1 &
  done
fi
python3 -c "
import time, torch; t=time.time()
from mla_verify._build import load
from mla_verify.api import device_arch
a = device_arch(torch.device('cuda')); load(a); print('jit build', a, 's', round(time.time()-t,1))" 2>&1 | tail -5 | tee -a "$LOG"
wait
if [ "$MODE" = gs ]; then
  DL=${GS_DEADLINE:-230}
  lim() { local l=$((DL - SECONDS - 5)); [ "$l" -gt "$1" ] && l=$1; [ "$l" -lt 1 ] && l=1; echo "$l"; }
  say "full parity suite (limit $(lim 90) s)"
  timeout "$(lim 90)" python3 -m verify_tools.parity --json > "$OUT/parity.json" 2>>"$LOG"; echo "parity rc=$?" | tee -a "$LOG"
  python3 -c "import json;d=json.load(open('$OUT/parity.json'));print('parity', d.get('ok'), d.get('summary'))" 2>&1 | tee -a "$LOG"
  say "GPU pytest (limit $(lim 60) s)"
  timeout "$(lim 60)" python3 -m pytest -q -p no:cacheprovider tests/kernels/test_kernel_gpu_parity.py > "$OUT/pytest.txt" 2>&1; echo "pytest rc=$?" | tee -a "$LOG"; tail -3 "$OUT/pytest.txt" | tee -a "$LOG"
  B=""; [ -d .v6base/kernels/mla_verify/csrc ] && B="base=.v6base/kernels/mla_verify/csrc"
  ABL=90; [ -n "${GS_TREES:-}" ] && B="$B,$GS_TREES" && ABL=125  # ~25 s per extra tree
  say "A/B in one process: cur vs $B (limit $(lim $ABL) s)"
  timeout "$(lim $ABL)" python3 -m verify_tools.bench --tree-ab "$B" --ab-out "$OUT/ab.json" > /dev/null 2> >(grep "^\[ab\]" | tee -a "$LOG" >&2); echo "ab rc=$?" | tee -a "$LOG"
  say "bench: graph-buffer mode (12 rows) + B=1 4k (limit $(lim 60) s)"
  timeout "$(lim 60)" python3 -m verify_tools.bench --json --no-sglang --no-flashmla --graph-buffer --shapes 1:4096:8:16 > "$OUT/bench.json" 2> >(grep "^\[bench\]" | tee -a "$LOG" >&2); echo "bench rc=$?" | tee -a "$LOG"
  if [ $((DL - SECONDS)) -gt 45 ]; then
    say "racecheck fp8_b32_chain_n8_h16_prefix1k (the grid-stride combine's smem reuse)"
    sanitize "$(lim 75)" racecheck:fp8_b32_chain_n8_h16_prefix1k
  else say "sanitizer skipped: $((DL - SECONDS)) s left"; fi
  say "done"
  exit 0
fi
say "parity"
FP8_CASES=fp8_seed_b1_prefix65k_n8_h16_chain,fp8_b4_varlen_tree_h16_u8,fp8_b2_n16_h128_tree_scales,fp8_b32_chain_n8_h16_prefix1k,fp8_codes_exact
GRAPH_CASES=graph_b1_n8_h16_32k,graph_b3_varlen_n4_h16,graph_fp8_b2_n8_h16
if [ "$MODE" = graph ]; then PARGS="--cases $GRAPH_CASES,seed_b1_prefix65k_n8_h16_chain,b4_varlen_tree_h16,b4_prefix0_mixed_h16,fp8_b4_varlen_tree_h16_u8,fp8_codes_exact"
elif [ "$MODE" = splits ]; then PARGS="--cases b1_full_nomask_h16,b1_n1_h128_prefix4k,b4_prefix0_mixed_h16,seed_b1_prefix65k_n8_h16_chain,fp8_codes_exact"
elif [ "$MODE" = quick ] || [ "$MODE" = dev ]; then PARGS="--cases seed_b1_prefix65k_n8_h16_chain,b1_prefix0_n4_h16_tree,b4_varlen_tree_h16,b2_n16_h128_tree_prefix3k,b3_tree_n32_h16_valias_idx64,$FP8_CASES"; else PARGS=""; fi
timeout 240 python3 -m verify_tools.parity --json $PARGS > "$OUT/parity.json" 2> >(tee -a "$LOG" >&2); echo "parity rc=$?" | tee -a "$LOG"
if [ "$MODE" = splits ]; then
  say "split counts: v3 rule vs current, B=1 n=8 H=16, graph replay, L2 flushed"
  timeout 120 python3 - <<'PY' 2>&1 | tee -a "$LOG" "$OUT/splits.txt"
import math, torch
from mla_verify import api, tiles, mla_verify_fwd
from mla_verify.inputs import CaseSpec, make_inputs, kernel_args
from verify_tools.bench import Timer
def v3(B, n, H, total, sms, cfg, cps):  # the v3 heuristic, verbatim in effect
    ctas = B * math.ceil(n * H / cfg.block_m); slots = sms * cps
    if ctas >= 0.8 * slots: return 1
    s = max(1, slots // ctas); s = min(s, max(1, int(total / B // (2 * cfg.block_n))))
    s = min(s, max(1, int(max(total * 1152, 32 * 2**20) // (B * n * H * 513 * 8)))); return max(1, min(s, 128))
t = Timer(torch, torch.cuda.get_device_properties(0).L2_cache_size)
cfg = tiles.SM90WG; sms = torch.cuda.get_device_properties(0).multi_processor_count
for L in (4096, 8192, 16384, 32768):
    inp = make_inputs(CaseSpec("s", (L,), (8,), 16, tree="chain", poison=False, seed=L), "cuda"); a = kernel_args(inp)
    s3 = v3(1, 8, 16, L, sms, cfg, 1); s4 = api.choose_num_splits(1, 8, 16, L, sms, cfg, 1)
    res = {}
    for s in sorted({s3, s4, 16, 32, 64, 66}):
        us, _ = t.time_graph_or_eager(lambda s=s: mla_verify_fwd(*a, sm_scale=inp["sm_scale"], num_splits=s)); res[s] = (us, inp["o_extend"].float().clone())
    ref = res[s3][1]
    print(f"L={L} v3 S={s3} {res[s3][0]:.1f}us  v4 S={s4} {res[s4][0]:.1f}us  ratio v4/v3 {res[s4][0] / res[s3][0]:.3f}  all: " + " ".join(f"S{s}={v[0]:.1f}(d{float((v[1]-ref).norm()/ref.norm()):.0e})" for s, v in res.items()))
PY
  exit 0
fi
say "bench"
if [ "$MODE" = quick ]; then BARGS="--quick"; elif [ "$MODE" = graph ]; then
  BARGS="--no-sglang --graph-buffer --shapes 1:4096:8:16,1:32768:8:16,32:8192:8:16,4:131072:4:16"
elif [ "$MODE" = dev ]; then
  BARGS="--no-sglang --graph-buffer --shapes 1:4096:8:16,1:32768:8:16,1:131072:8:16,32:8192:8:16,8:32768:8:16,4:32768:8:128,4:131072:4:16"
else BARGS=""; fi
# Usage modes: quick (subset), full (all + long sanitizer), final (all + short sanitizer)
timeout 300 python3 -m verify_tools.bench --json --plot "$OUT/bench.png" $BARGS > "$OUT/bench.json" 2> >(tee -a "$LOG" >&2); echo "bench rc=$?" | tee -a "$LOG"
if [ "$MODE" = dev ]; then
  say "per-kernel device time (torch.profiler / CUPTI), n=8 H=16"
  timeout 120 python3 - <<'PY' 2>&1 | tee -a "$LOG"
import torch
from torch.profiler import profile, ProfilerActivity
from mla_verify.inputs import CaseSpec, make_inputs, kernel_args
from mla_verify import mla_verify_fwd
for B, L in ((1, 4096), (1, 32768), (32, 8192)):
    inp = make_inputs(CaseSpec("p", (L,) * B, (8,) * B, 16, tree="chain", poison=False, seed=1), "cuda")
    args = kernel_args(inp)
    for cfg in ("sm90wg", "sm90"):
        for _ in range(3): mla_verify_fwd(*args, sm_scale=inp["sm_scale"], tile_config=cfg)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(20): mla_verify_fwd(*args, sm_scale=inp["sm_scale"], tile_config=cfg)
            torch.cuda.synchronize()
        for e in prof.key_averages():
            if "mla_verify" in e.key: print(f"B={B} L={L} {cfg}: {e.key[:60]} avg {e.device_time:.1f} us x{e.count}")
PY
  SO=$(find /tmp/mlav-cache -name 'mla_verify_sm_90a_*.so' | head -1)
  cuobjdump -sass "$SO" > "$OUT/sass.txt" 2>&1; echo "sass dump rc=$? $(wc -l < "$OUT/sass.txt") lines" | tee -a "$LOG"
  say "compute-sanitizer memcheck (small cases, all configs, bf16 + fp8 cache)"
  sanitize 120 memcheck:b4_varlen_tree_h16 memcheck:fp8_b4_varlen_tree_h16_u8 racecheck:fp8_b2_n16_h128_tree_scales
elif [ "$MODE" = graph ]; then
  say "A/B: split kernels' early PDL signal on (MLAV_PDL_EARLY=1, default) vs off, same process, graph replay, L2 flushed"
  timeout 120 python3 - <<'PY' 2>&1 | tee -a "$LOG" "$OUT/pdl_ab.txt"
import os, torch
from mla_verify import api, tiles, mla_verify_fwd
from mla_verify.inputs import CaseSpec, make_inputs, kernel_args
from verify_tools.bench import Timer
t = Timer(torch, torch.cuda.get_device_properties(0).L2_cache_size)
for B, L, n, H in ((1, 512, 8, 16), (1, 4096, 8, 16), (1, 32768, 8, 16), (32, 8192, 8, 16), (4, 131072, 4, 16)):
    inp = make_inputs(CaseSpec("p", (L,) * B, (n,) * B, H, tree="chain", poison=False, seed=L + B), "cuda"); a = kernel_args(inp)
    res = {"1": [], "0": []}; outs = {}
    for rep in range(2):
        for flag in ("1", "0"):
            os.environ["MLAV_PDL_EARLY"] = flag
            us, _ = t.time_graph_or_eager(lambda: mla_verify_fwd(*a, sm_scale=inp["sm_scale"])); res[flag].append(us)
            outs[flag] = inp["o_extend"].clone()
    on, off = min(res["1"]), min(res["0"])
    print(f"B={B} L={L} n={n} H={H}: early {on:.1f}us off {off:.1f}us ratio on/off {on / off:.3f} (runs {res}) same output {torch.equal(outs['1'], outs['0'])}")
    os.environ["MLAV_PDL_EARLY"] = "1"  # the device-side split rule's cost: auto vs the same count given explicitly
    S = api.choose_num_splits(B, n, H, B * L, torch.cuda.get_device_properties(0).multi_processor_count, tiles.SM90WG, 1)
    ra, rx = [], []
    for rep in range(2):
        ra.append(t.time_graph_or_eager(lambda: mla_verify_fwd(*a, sm_scale=inp["sm_scale"]))[0]); oa = inp["o_extend"].clone()
        rx.append(t.time_graph_or_eager(lambda: mla_verify_fwd(*a, sm_scale=inp["sm_scale"], num_splits=S))[0]); ox = inp["o_extend"].clone()
    print(f"B={B} L={L} n={n} H={H}: auto (device rule) {min(ra):.1f}us explicit S={S} {min(rx):.1f}us ratio {min(ra) / min(rx):.3f} same output {torch.equal(oa, ox)}")
os.environ["MLAV_PDL_EARLY"] = "1"
PY
  say "compute-sanitizer memcheck (graph replay case, all configs)"
  sanitize 120 memcheck:graph_b3_varlen_n4_h16
elif [ "$MODE" = final ]; then
  say "compute-sanitizer (short)"
  sanitize 150 memcheck:b4_varlen_tree_h16 memcheck:seed_b1_prefix65k_n8_h16_chain \
    racecheck:b4_prefix0_mixed_h16 racecheck:seed_b1_prefix65k_n8_h16_chain \
    memcheck:fp8_b4_varlen_tree_h16_u8 racecheck:fp8_b2_n16_h128_tree_scales
elif [ "$MODE" != nosan ]; then
  say "compute-sanitizer"
  sanitize 240 memcheck:b4_varlen_tree_h16 memcheck:seed_b1_prefix65k_n8_h16_chain \
    racecheck:b4_varlen_tree_h16 racecheck:seed_b1_prefix65k_n8_h16_chain
fi
say "summary"
python3 - <<'PY' 2>&1 | tee -a "$LOG"
import json, os
out = os.environ.get("OUT", "/tmp/mlav-out")
def load(n):
    try: return json.load(open(os.path.join(out, n)))
    except Exception as e: return {"error": str(e)}
b = next((load(f) for f in sorted(os.listdir(out)) if f.startswith("build_")), {}); print("build", b.get("ok"), b.get("summary"))
p = load("parity.json"); print("parity", p.get("ok"), p.get("summary"))
for c in p.get("cases", []): print(f"  {c['name']:<36} {c['tile_config']:<6} ok={c['ok']} rel={c['rel_err']:.2e} tok={c['token_mismatches']} det={c['deterministic']}")
x = load("bench.json"); print("bench", x.get("ok"), x.get("summary"), x.get("sglang"))
for r in x.get("rows", []): print(f"  B{r['B']} L{r['L']} n{r['n']} H{r['H']} new {r['new_us']:.1f}us floor {r['floor_us']:.1f} SOL {r['sol_pct']:.1f}% ext {r.get('sglang_extend_us',0):.0f} ver {r.get('sglang_verify_us',0):.0f} orc {r.get('oracle_us',0):.0f} S={r.get('num_splits')} cfgs={ {k: round(v, 1) for k, v in r.get('configs_us', {}).items()} } fp8={r.get('fp8_us', 0):.1f}us x{r.get('fp8_over_bf16', 0):.3f} fp8err={r.get('fp8_rel_err_vs_oracle')}")
for r in x.get("graph_buffer", []): print(f"  graph-buffer B{r['max_bs']} n{r['n']} H{r['H']} L{r['L']}: {r['graph_buffer_us']:.1f} vs exact {r['exact_us']:.1f} us ratio {r['ratio']:.3f} S grid/eff/exact {r['splits_graph_buffer']}/{r.get('splits_effective')}/{r['splits_exact']} bitwise {r.get('replay_equal_exact_bitwise')}")
for r in p.get("graph_replays", []): print(f"  graph-replay {r['name']:<26} {r['tile_config']:<6} {r['replay_lens']} ok={r['ok']} S {r['splits_grid']}/{r['splits_effective']} bitwise={r['equal_eager_same_splits']} auto={r['equal_eager_auto']} rel={r.get('rel_err', float('nan')):.2e} tok={r.get('token_mismatches', '-')}")
PY
