#!/usr/bin/env bash
# Run on the local machine before next_call1.sh (the device gets no git history): 4b3ffb7's csrc (MODE 2 before the
# warp-uniform shuffle, as measured in session 24 calls 1 and 4) built with MLAV_WS=3, into the git-ignored
# .cache/m2_noshfl, carried by the call.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
rm -rf .cache/m2_noshfl /tmp/prep_next && mkdir -p .cache/m2_noshfl /tmp/prep_next
git archive 4b3ffb7 kernels/mla_verify/csrc | tar -x -C /tmp/prep_next
cp -r /tmp/prep_next/kernels/mla_verify/csrc/. .cache/m2_noshfl/
sed -i 's/#define MLAV_WS 1/#define MLAV_WS 3/' .cache/m2_noshfl/mla_verify.cu
grep -c "define MLAV_WS 3" .cache/m2_noshfl/mla_verify.cu
