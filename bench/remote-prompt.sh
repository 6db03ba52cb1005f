#!/usr/bin/env bash
# Remote control's cost where a person waits (issue 32): a prompt and the agent's first update
# back from a device through a real handler-gateway on this machine ÷ from a local WebSocket
# attachment of the same session, alternated, medians (the test profile, as the other benches under bench/). ROUNDS (default 15).
set -euo pipefail
cd "$(dirname "$0")/.."
HANDLER_BENCH_ROUNDS="${1:-15}" cargo test -p handler-bins --test it -- --ignored --nocapture \
    --test-threads 1 bench_a_devices_prompt_against_a_local_attachment 2>&1 | grep -oE 'BENCH.*'
