#!/usr/bin/env bash
# The git guard's cost (issue 14): guarded ÷ unguarded sandbox start on a repository of 10 000
# files and 1 000 commits, and the bring-back of one commit, against real rootless Podman as the
# test user (run as root after .ci/setup-podman.sh). ROUNDS alternated starts (default 7).
set -euo pipefail
cd "$(dirname "$0")/.."
HANDLER_BENCH_ROUNDS="${1:-7}" cargo test -p handler-bins --test it -- --ignored --nocapture \
    daemon_git_guard::bench_guarded_start_and_bring_back 2>&1 | grep -E '^(BENCH|repository)'
