#!/usr/bin/env bash
# Prepared in session 37; ran as session 38 call 1 on an H100 (files docs/results/session38_calls/call1_*), no
# carry: bash docs/results/session37_calls/next_call1.sh (<= 330 s; CALL_BUDGET_S=150 keeps steps 1-2 and cuts the
# bench). Nothing shipped changes.
# 1. A test of the notes' "Session 37" model of the ASYM loop: with two KV stages the tile period is (C + L) / 2, C =
#    a stage's hold from its tile's landing to both PVs' end, L = its refill (the page-size-1 gather); by the model,
#    E1-E3 (S(j+1) behind PV(j)) lost because they lengthen C. Trees, one process, graph replays, L2 flushed: base =
#    the checkout's csrc; nlb = base with -DMLAV_DIAG_NOLOAD=1 (no KV copies from tile 2 on: timing only, wrong
#    output); cur = base + session36_calls/e3.patch; nle3 = cur with the same define. The model predicts nlb / base
#    well below 1 on the ASYM rows (about C / period, ~0.9 from session 23's trace) and nle3 / nlb < 1 (without the
#    gather, S(j+1) behind PV(j) hides the tensor pipe's drain). If nle3 / nlb >= 1, that prediction fails: the
#    overlap buys nothing even without the gather, and the idea is dead whatever the loads do.
# 2. tests/device/gather_rate.cu: the gather alone, with a consumer that holds each stage HOLD cycles (L measured
#    directly: period = (HOLD + L) / 2 where L > HOLD); the shipped cp.async form against per-token 2D TMA loads (9
#    boxes of 64 dims x 1 row, SWIZZLE_128B) and against itself with the .L2::256B prefetch hint (cp256, added in
#    session 38); and whether they land the same bytes (if so, a TMA producer is possible for the page-size-1 cache).
# 3. The phase-2 bench rows of the shipped kernel on this card (as session 33 call 2's bench step).
# Tree pf (session 38) rides in step 1's A/B: base with the .L2::256B prefetch hint on every cp.async (the row gather
# reads 1,152 contiguous bytes per token; the hint lets L2 fetch them in 256-byte pairs of lines). Bitwise equal by
# construction; keep rule: pf / base <= 0.99 on every ASYM row and <= 1.005 on the B=1 rows.
set -o pipefail
. tests/device/call_budget.sh 330  # R, L, left, say, lim
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader | tee -a "$L"
C=kernels/mla_verify/csrc; H=mla_verify_wgmma_ws.cuh
nolo() { rm -rf "$2" && cp -r "$1" "$2" && { echo "#define MLAV_DIAG_NOLOAD 1"; cat "$1/$H"; } > "$2/$H"; }
rm -rf /tmp/base && cp -r $C /tmp/base && nolo /tmp/base /tmp/nlb
# pf (session 38): base with the .L2::256B prefetch hint on every cp.async (cp_async16), gather_rate's cp256 form
rm -rf /tmp/pf && cp -r $C /tmp/pf && sed -i 's/cp\.async\.cg\.shared\.global \[/cp.async.cg.shared.global.L2::256B [/' \
  /tmp/pf/mla_verify_kernel.cuh && grep -q 'L2::256B' /tmp/pf/mla_verify_kernel.cuh || { echo "pf sed failed" | tee -a "$L"; exit 4; }
P=docs/results/session36_calls/e3.patch
git apply "$P" 2>>"$L" || patch -p1 <"$P" >>"$L" 2>&1 || { echo "e3.patch did not apply" | tee -a "$L"; exit 4; }
grep -q "define MLAV_ASYM_PIPE 1" $C/$H || { echo "E3 not in the tree" | tee -a "$L"; exit 4; }
nolo $C /tmp/nle3
for t in base nlb nle3 pf; do
  python3 -c "import sys; from verify_tools.bench import load_tree; load_tree('sm_90a', sys.argv[1])" /tmp/$t >>"$L" 2>&1 &
done
nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 -DMLAV_BUILD_CFG90=1 -I $C -o /tmp/gather_rate \
  tests/device/gather_rate.cu >>"$L" 2>&1 &
python3 -c "from mla_verify._build import load; load('sm_90a')" >>"$L" 2>&1 || { tail -5 "$L"; exit 3; }
wait; say built
cd kernels || exit 2
timeout "$(lim 150)" python3 -m verify_tools.bench --tree-ab base=/tmp/base,nlb=/tmp/nlb,nle3=/tmp/nle3,pf=/tmp/pf --ab-kv bf16 \
  --ab-reps 3 --ab-gb-trees none --shapes 8:32768:8:16,32:8192:8:16,4:65536:4:64,2:16384:8:128,1:32768:8:16 \
  --ab-out "$OUT/ab_model.json" >/dev/null 2>>"$OUT/ab_err.txt"
echo "ab rc=$?" | tee -a "$L"
# nle3 / nlb: the quotient of their two ratios over base
python3 -m verify_tools.bench --ab-summary "$OUT/ab_model.json" 2>&1 | tee -a "$L"
say "ab done"
timeout "$(lim 60)" /tmp/gather_rate 2>&1 | tee "$OUT/gather_rate.txt" | tee -a "$L"
echo "gather_rate rc=$?" | tee -a "$L"
cd "$R" && rm -rf $C && cp -r /tmp/base $C && cd kernels || exit 2  # the shipped csrc again
timeout "$(lim 120)" python3 -m verify_tools.bench --json --no-sglang --no-flashmla > "$OUT/bench.json" \
  2>>"$OUT/bench_err.txt"
echo "bench rc=$?" | tee -a "$L"
grep '^\[bench\]' "$OUT/bench_err.txt" | tee -a "$L"  # the bench's own line per row
python3 -c "import json;d=json.load(open('$OUT/bench.json'));print('bench', d.get('ok'), d.get('summary'))" 2>&1 | tee -a "$L"
say done
