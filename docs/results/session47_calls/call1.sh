#!/usr/bin/env bash
# Session 47 call 1 (nvidia-h200 asked, an H100 came; 84 s): session 46's prepared first call as it stands.
bash docs/results/session46_calls/next_call1.sh
