#!/usr/bin/env bash
# FlashMLA as a peer of both verify kernels, on the device machine (H200, sm_90): the dense bench
# (verify_tools.bench's flashmla_peer: FlashMLA's legacy dense decode on a page-64 copy of the same
# context + draft KV) and the DSA bench (verify_tools.dsa_bench's `flashmla` key: fp8 rows through
# FlashMLA's sparse decode as SGLang's flashmla_kv calls it, bf16 rows through its sparse prefill
# kernel flash_mla_sparse_fwd), same inputs and same run as ours.
# The DSA part ran on the H200 (2026-12-01, DSA run 10, as `dsa_bench --quick --no-sglang` with the wheel on
# PYTHONPATH: docs/results/dsa_bench_flashmla_h200_run10.json). The whole script ran on the H200 in session 8
# (2026-12-01, tree 1abb835, carry .whl-flashmla .whl .whl-dsa, 275.9 s, rc 0): smoke 3/3 entry points ok; dense ours/FlashMLA
# speed 1.35x / 0.68x / 0.60x, DSA 0.31x-5.85x (docs/results/*_flashmla_h200_session8.json). Dense ran --no-sglang anyway
# there: the `.whl` check ran after `cd kernels` (it now looks in ../.whl; not re-run since).
#
# Carry `.whl-flashmla` (git-ignored, never committed; made by tests/device/make_wheels.sh:
# `pip download sgl-flash-mla==1.0.0 --no-deps`): sgl_flash_mla-1.0.0-cp310-abi3-manylinux2014_x86_64.whl,
# 9.9 MB, package `flash_mla`, built against PyTorch's stable C++ ABI (abi3) and CUDA 13 (its
# README asks for CUDA 13.1+; the device's torch is 2.11 cu130, and the wheel's metadata says
# torch>=2.14.1, which --no-deps does not enforce: the import line below says whether it loads).
# Optional carries: `.whl` (+ `.whl-dsa`) to also run SGLang's DSA Triton peer in the DSA bench
# (.whl is ~40 MB: mind the 64 MiB carry limit). Without them SGLang's peers are skipped with their
# reason (and the dense bench runs --no-sglang).
# Usage: bash tests/device/flashmla_peer.sh [dense B:L:n:H,...]    (JSON + logs under $OUT)
# Device call (one, ~6-8 min):
#   run(command="bash tests/device/flashmla_peer.sh", carry=[".whl-flashmla"], kind="nvidia-h200", timeout_s=600)
set -o pipefail
SHAPES=${1:-1:32768:8:16,8:32768:8:16,4:65536:4:64}
OUT=${OUT:-/tmp/fm-out}; mkdir -p "$OUT"
LOG="$OUT/fm_log.txt"
export PYTHONUNBUFFERED=1 MAX_JOBS=16 ORCHESTRATOR_KERNEL_CACHE=/tmp/mlav-cache
if [ ! -d .whl-flashmla ]; then echo "blocked: .whl-flashmla not carried" | tee -a "$LOG"; exit 75; fi
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/fmsite .whl-flashmla/*.whl \
  >>"$LOG" 2>&1 || echo "pip install of .whl-flashmla failed (see above)" | tee -a "$LOG"
SITE=/tmp/fmsite
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl >>"$LOG" 2>&1 \
    && python3 -m zipfile -e .whl/sglang-0.5.23-pyonly.zip /tmp/site >>"$LOG" 2>&1 && SITE=$SITE:/tmp/site
fi
if [ -d .whl-dsa ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl-dsa/*.whl >>"$LOG" 2>&1
fi
export PYTHONPATH=$SITE:$PWD/kernels:$PWD
{ git rev-parse HEAD 2>/dev/null || echo "no git"; git status --short 2>/dev/null | head -20
  nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv 2>&1
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" 2>&1 | tail -1
} > "$OUT/env.txt"
cat "$OUT/env.txt" | tee -a "$LOG"
# 1. does the wheel load here, and does each entry point run on tiny inputs (before any bench)
cd kernels || exit 1
timeout 120 python3 - > "$OUT/flashmla_smoke.txt" 2>&1 <<'PY'
import traceback

import torch

try:
    import flash_mla
    print("import flash_mla: ok", flash_mla.__version__, "legacy:", flash_mla.has_legacy(), flash_mla.__file__)
except Exception as exc:
    print("import flash_mla: FAILED", type(exc).__name__, exc)
    raise SystemExit(0)
print("device", torch.cuda.get_device_name(0), torch.cuda.get_device_capability(0))
from verify_tools.bench import paged_copy
from verify_tools.dsa_bench import flashmla_args, flashmla_fn, flashmla_out
from dsa_verify.inputs import DsaCase, make_inputs
from dsa_verify.layout import quantize_cache
from dsa_verify.reference import dsa_verify_ref


def step(name, fn):
    try:
        print(name, "ok", fn())
    except Exception as exc:
        print(name, "FAILED", type(exc).__name__, str(exc)[:400])
        traceback.print_exc(limit=3)


def dense():  # B=2, 300 + 4 tokens, H=16, causal among the 4 drafts, vs a torch reference
    B, n, H, ctx = 2, 4, 16, 304
    kb = torch.randn(1000, 1, 576, device="cuda").to(torch.bfloat16)
    slots = [torch.randperm(1000, device="cuda")[:ctx] for _ in range(B)]
    kc, table, sl = paged_copy(torch, kb, slots)
    q = torch.randn(B, n, H, 576, device="cuda").to(torch.bfloat16)
    meta, splits = flash_mla.get_mla_decoding_metadata(sl, n * H, 1, None, False, None, use_legacy=True)
    sched = flash_mla.flash_mla_interface.FlashMLASchedMeta(tile_scheduler_metadata=meta, num_splits=splits)
    o = flash_mla.flash_mla_with_kvcache(q, kc, table, sl, 512, sched, softmax_scale=0.07, causal=True, use_legacy=True)[0]
    err = 0.0
    for b in range(B):
        k = kb[slots[b], 0].float()
        lg = torch.einsum("shd,kd->shk", q[b].float(), k) * 0.07
        mask = torch.arange(ctx, device="cuda")[None, :] > (ctx - n + torch.arange(n, device="cuda"))[:, None]
        ref = torch.einsum("shk,kd->shd", torch.softmax(lg.masked_fill(mask[:, None], float("-inf")), -1), k[:, :512])
        err = max(err, float((o[b].float() - ref).norm() / ref.norm()))
    return f"out {tuple(o.shape)} rel err vs torch {err:.2e}"


def sparse(kv):
    d = make_inputs(DsaCase("smoke", (3000,), 4, 8, kv="bf16", seed=1, poison=False), "cuda")
    cache = d["kv_cache"] if kv == "bf16" else quantize_cache(d["kv_cache"])
    args = flashmla_args(d["q_all"], cache, d["page_table_1"], d["seq_lens"], kv)
    o = flashmla_out(flashmla_fn(flash_mla, args, 0.0625)(), 8).float()
    ref = dsa_verify_ref(d["q_all"], cache, d["page_table_1"], d["seq_lens"], 0.0625)
    ref = (ref[0] if isinstance(ref, tuple) else ref).float()
    return f"out {tuple(o.shape)} rel err vs dsa_verify_ref {float((o - ref).norm() / ref.norm()):.2e}"


step("dense decode (legacy, bf16, causal, page 64)", dense)
step("sparse prefill flash_mla_sparse_fwd (legacy, bf16)", lambda: sparse("bf16"))
step("sparse decode flash_mla_with_kvcache (legacy, fp8 V32)", lambda: sparse("fp8"))
PY
echo "smoke rc=$?" | tee -a "$LOG"; cat "$OUT/flashmla_smoke.txt" | tee -a "$LOG"
# an entry point that failed in the smoke is left out of the bench (a sticky CUDA error there would
# cost our own rows); its reason is the smoke's line above
FM_DENSE=; FM_DSA=
grep -q "^dense decode.* FAILED" "$OUT/flashmla_smoke.txt" && FM_DENSE=--no-flashmla
grep -q "^sparse .* FAILED" "$OUT/flashmla_smoke.txt" && FM_DSA=--no-flashmla
echo "bench flags: dense '$FM_DENSE' dsa '$FM_DSA'" | tee -a "$LOG"
# 2. the dense bench: ours vs FlashMLA (and FlashInfer / SGLang if importable: skipped otherwise)
NOSGL=--no-sglang; [ -d ../.whl ] && NOSGL=  # (cwd: kernels/)
echo "== dense bench $SHAPES ($(date +%T))" | tee -a "$LOG"
timeout "${FM_DENSE_TIMEOUT_S:-240}" python3 -m verify_tools.bench --json $NOSGL $FM_DENSE --no-graph-buffer --shapes "$SHAPES" \
  > "$OUT/bench_flashmla.json" 2> >(tee -a "$LOG" >&2)
echo "dense bench rc=$?" | tee -a "$LOG"
# 3. the DSA bench: the headline shapes (bf16 + fp8 each), FlashMLA as a peer
echo "== dsa bench --quick ($(date +%T))" | tee -a "$LOG"
timeout "${FM_DSA_TIMEOUT_S:-240}" python3 -m verify_tools.dsa_bench --json --quick --reps 20 $FM_DSA \
  --budget-s "${FM_DSA_BUDGET_S:-150}" --out "$OUT/dsa_bench_flashmla.json" > /dev/null 2> >(tee -a "$LOG" >&2)
echo "dsa bench rc=$?" | tee -a "$LOG"
python3 - "$OUT/bench_flashmla.json" "$OUT/dsa_bench_flashmla.json" <<'PY' | tee -a "$LOG"
import json, sys

def load(p):
    try:
        return json.load(open(p))
    except Exception as exc:
        print(p, "unreadable:", exc)
        return {}

d = load(sys.argv[1])
print("dense flashmla:", d.get("flashmla"))
for r in d.get("rows", []):
    fm = r.get("flashmla_us")
    print((r["B"], r["L"], r["n"], r["H"]), f"ours {r['new_us']:.1f}us",
          f"flashmla {fm:.1f}us ours speed vs flashmla {fm / r['new_us']:.2f}x rel err {r.get('rel_err_vs_flashmla'):.1e}"
          if fm else f"flashmla skipped: {r.get('flashmla_skipped', '')[:150]}", "fastest:", r.get("fastest_peer"))
d = load(sys.argv[2])
print("dsa flashmla:", d.get("flashmla"), "summary:", json.dumps(d.get("summary")))
for r in d.get("rows", []):
    fm = r.get("flashmla", {})
    us = lambda v: f"{v * 1e6:.2f}us" if isinstance(v, float) else v
    print((r["B"], r["L"], r["n"], r["H"], r["kv"]), "ours", us(r.get("ours_s")), "flashmla",
          us(fm.get("s")) if "s" in fm else "skipped: " + str(fm.get("skipped"))[:150],
          "rel err", fm.get("rel_err_vs_ours"), "fastest", r.get("fastest"))
PY
