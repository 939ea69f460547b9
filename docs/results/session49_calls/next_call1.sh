#!/usr/bin/env bash
# Prepared in session 49 (device lending paused after six failed starts: never ran), for the next session, ~460 s, no
# carry:   bash docs/results/session49_calls/next_call1.sh   (run timeout ~500)
# Superseded in session 50 by docs/results/session50_calls/next_call1.sh (n8x) and next_call2.sh (this DSA half,
# trimmed, and the dense half).
# 1. The DSA call (dsa_call.sh, held to DSA_S = 240 s; its files under $OUT/dsa): bf16 partials A/B, parity, n8 split
#    counts, timeline.
# 2. Session 48's prepared dense call (next_call1.sh there, held to DENSE_S = 200 s): the gated pair's order.
mkdir -p "$OUT/dsa"
OUT=$OUT/dsa CALL_BUDGET_S=${DSA_S:-240} bash docs/results/session49_calls/dsa_call.sh
git status --short | head -5
CALL_BUDGET_S=${DENSE_S:-200} bash docs/results/session48_calls/next_call1.sh
