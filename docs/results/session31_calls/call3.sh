#!/usr/bin/env bash
# Session 31, call 3 (carry .abbase; ~6 min): calls 1 and 2 merged to spare a machine start (refused starts cost
# this session ~600 s of device time). 1. session30_calls/call7.sh as prepared (gs_prefetch0.patch applied to this
# checkout); 2. the split sweep of call2.sh on the shipped kernel (the patch undone first: j4's .cuh copied back).
R=$PWD
bash docs/results/session30_calls/call7.sh 2>&1 | tail -14
cd "$R" && cp .abbase/j4/mla_verify_kernel.cuh kernels/mla_verify/csrc/ && bash docs/results/session31_calls/call2.sh 2>&1 | tail -12
