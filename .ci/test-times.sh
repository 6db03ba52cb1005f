#!/usr/bin/env bash
# The test run's timing, from the test harness's own output (issue 34 item 4): each test binary's
# "finished in", slowest first, and every test libtest reported running over 60 s with its
# approximate time (its report's time − 60 s before it, to its result line). Reads the log
# `.ci/test` writes: each line prefixed with the seconds since the run began.
set -euo pipefail
log="${1:?usage: test-times.sh LOG}"
awk '
function crate_of(path,   p) { p = path; sub(/.*deps\//, "", p); sub(/-[0-9a-f]+\)?$/, "", p); return p }
{
    t = $1; sub(/^[0-9]+ /, "")
}
/^ *Running unittests / {
    match($0, /\(.*\)/); b = crate_of(substr($0, RSTART + 1, RLENGTH - 2))
    if ($0 ~ /unittests src\/lib\.rs/) crate = b
    bin = b " (unit)"; next
}
/^ *Running tests\// { match($0, /\(.*\)/); bin = crate " " crate_of(substr($0, RSTART + 1, RLENGTH - 2)); next }
/^ *Doc-tests / { bin = $2 " (doc)"; next }
/^test result: / && /finished in / { s = $0; sub(/.*finished in /, "", s); sub(/s$/, "", s); if (bin != "") times[bin] += s; next }
/^test .* has been running for over 60 seconds$/ { n = $0; sub(/^test /, "", n); sub(/ has been running.*/, "", n); started[n] = t - 60; next }
/^test .* \.\.\. (ok|FAILED|ignored)$/ { n = $0; sub(/^test /, "", n); sub(/ \.\.\. [A-Za-z]+$/, "", n); if (n in started) slow[n] = t - started[n]; next }
END {
    print "== test binaries by time (libtest'"'"'s own figure)"
    for (b in times) printf "%8.1f s  %s\n", times[b], b | "sort -rn | head -20"
    close("sort -rn | head -20")
    print "== tests over 60 s (approximate)"
    for (n in slow) printf "%6d s  %s\n", slow[n], n | "sort -rn | head -25"
    close("sort -rn | head -25")
}' "$log"
