#!/usr/bin/env bash
# Run on the local machine before next_call1.sh (the device gets no git history): c105980's csrc (MODE 1 before
# desc_add, built with MLAV_WS=2) into the git-ignored .cache/mode1_old, carried by the call.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
rm -rf .cache/mode1_old /tmp/prep_next && mkdir -p .cache/mode1_old /tmp/prep_next
git archive c105980 kernels/mla_verify/csrc | tar -x -C /tmp/prep_next
cp -r /tmp/prep_next/kernels/mla_verify/csrc/. .cache/mode1_old/
sed -i 's/#define MLAV_WS 1/#define MLAV_WS 2/' .cache/mode1_old/mla_verify.cu
grep -c "define MLAV_WS 2" .cache/mode1_old/mla_verify.cu
