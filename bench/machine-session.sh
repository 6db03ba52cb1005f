#!/usr/bin/env bash
# A session's start in a warm machine (issue 29): through handlerd with the fake agent, a session
# of an agent whose sessions run in a running machine made for it ÷ the same agent's settings
# launched in a fresh sandbox, prompt to answer, alternated, medians (run as root after
# .ci/setup-podman.sh). ROUNDS (default 9).
set -euo pipefail
cd "$(dirname "$0")/.."
HANDLER_BENCH_ROUNDS="${1:-9}" cargo test -p handler-bins --test it -- --ignored --nocapture \
    --test-threads 1 bench_a_session_start_in_a_warm_machine_against_a_fresh_launch 2>&1 | grep -oE 'BENCH.*'
