#!/usr/bin/env bash
# Session 49 call 1 (~200 s, no carry): the DSA call (session 48's prepared dense call waits: device time was short).
CALL_BUDGET_S=${CALL_BUDGET_S:-200} bash docs/results/session49_calls/dsa_call.sh
