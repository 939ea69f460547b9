#!/usr/bin/env bash
# Session 38 call 2, no carry, <= 420 s. The checkout's csrc is base (the shipped kernel); the script applies
# e4_first.patch (named e4.patch when this ran) to the device's copy only.
# E4 (MLAV_ASYM_PV_SPLIT=1): ASYM's S warpgroup issues PV(j)'s first two k-steps (tokens 0..31) right after P's
# first half is written, so they run in the tensor pipe while it writes the second half (exp2, the P stores, the
# handoff to the V warpgroup); the last two k-steps follow. Same wgmmas on the same accumulator in the same order:
# bitwise equal by construction. Why: call 1 put the batched (ASYM) rows on the consumers' hold C, not the gather
# (without the gather they run 0.877-0.935x base; the gather alone, gather_rate.cu, runs at 0.87x the kernel's
# period), and the S warpgroup's chain S -> softmax -> P write -> PV leaves the tensor pipe idle during the P write.
# Trees: base = the checkout's csrc; cur = base + e4_first.patch; nlb / nle4 = each with -DMLAV_DIAG_NOLOAD=1 (no KV
# copies from tile 2 on: timing only, wrong output): nle4 / nlb is E4's change to C alone. Then parity, racecheck
# and synccheck on E4's build, and the trace build (dense_trace.py) of base and E4 at B=8 L=32k.
# Keep rule: E4's ASYM rows <= 0.99 of base, the B=1 rows (MODE 0, same code) within the run's spread, all bitwise,
# graph-buffer rows <= 1.1, parity + replays pass, racecheck / synccheck clean; else drop the patch.
set -o pipefail
. tests/device/call_budget.sh 420  # R, L, left, say, lim
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader | tee -a "$L"
C=kernels/mla_verify/csrc; H=mla_verify_wgmma_ws.cuh
nolo() { rm -rf "$2" && cp -r "$1" "$2" && { echo "#define MLAV_DIAG_NOLOAD 1"; cat "$1/$H"; } > "$2/$H"; }
rm -rf /tmp/base && cp -r $C /tmp/base && nolo /tmp/base /tmp/nlb
P=docs/results/session38_calls/e4_first.patch
git apply "$P" 2>>"$L" || patch -p1 <"$P" >>"$L" 2>&1 || { echo "e4_first.patch did not apply" | tee -a "$L"; exit 4; }
grep -q "define MLAV_ASYM_PV_SPLIT 1" $C/$H || { echo "E4 not in the tree" | tee -a "$L"; exit 4; }
nolo $C /tmp/nle4
for t in base nlb nle4; do
  python3 -c "import sys; from verify_tools.bench import load_tree; load_tree('sm_90a', sys.argv[1])" /tmp/$t >>"$L" 2>&1 &
done
python3 -c "from mla_verify._build import load; load('sm_90a')" >>"$L" 2>&1 || { tail -5 "$L"; exit 3; }
wait; say built
cd kernels || exit 2
timeout "$(lim 170)" python3 -m verify_tools.bench --tree-ab base=/tmp/base,nlb=/tmp/nlb,nle4=/tmp/nle4 --ab-kv bf16 \
  --ab-reps 3 --ab-gb-trees cur \
  --shapes 8:32768:8:16,32:8192:8:16,4:65536:4:64,16:32768:4:16,2:16384:8:128,1:4096:8:16,1:32768:8:16 \
  --ab-out "$OUT/ab.json" >/dev/null 2>>"$OUT/ab_err.txt"
echo "ab rc=$?" | tee -a "$L"
python3 -m verify_tools.bench --ab-summary "$OUT/ab.json" 2>&1 | tee -a "$L"
say "ab done"
timeout "$(lim 60)" python3 -m verify_tools.parity --json > "$OUT/parity.json" 2>>"$OUT/parity_err.txt"
echo "parity rc=$?" | tee -a "$L"
python3 -c "import json;d=json.load(open('$OUT/parity.json'));print('parity', d.get('ok'), d.get('summary'))" 2>&1 | tee -a "$L"
say "parity done"
for spec in racecheck:b8_shared_prefix_tree_h16 synccheck:b8_shared_prefix_tree_h16; do
  tool=${spec%%:*}; c=${spec#*:}; t=$(lim 90); [ "$t" -lt 30 ] && { echo "SKIP $spec: budget" | tee -a "$L"; continue; }
  timeout "$t" compute-sanitizer --tool "$tool" --kernel-name kns=mla_verify --print-limit 20 --log-file "$OUT/san_$tool.log" \
    python3 -m verify_tools.parity --cases "$c" --json > "$OUT/san_$tool.out" 2>&1
  echo "$tool rc=$?" | tee -a "$L"; tail -2 "$OUT/san_$tool.log" | tee -a "$L"
done
say "sanitizers done"
for t in cur base; do  # the trace build: SM cycles per tile and phase, per warpgroup
  c=""; [ $t = base ] && c="--csrc /tmp/base"
  tl=$(lim 70); [ "$tl" -lt 40 ] && { echo "SKIP trace $t: budget" | tee -a "$L"; continue; }
  timeout "$tl" python3 ../tests/device/dense_trace.py 8:32768:8:16 $c --out "$OUT/trace_$t.json" 2>>"$OUT/trace_err.txt" \
    | grep "^\[trace\]" | sed "s/^/$t /" | tee -a "$L"
done
say done
