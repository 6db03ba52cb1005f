#!/usr/bin/env bash
# Opt-in (minutes, the npm and PyPI registries, the Debian mirror): the first half of the five
# real agents end to end (issue 15) — through handlerd's API only, as the unprivileged user
# ($HANDLER_TEST_USER, default handler-test): a handlerd on a fresh state folder builds the
# toolbox (its local Debian base made by debootstrap when missing) and the codex, claude-code,
# gemini, pi and vibe images; per build its time, per image its size, into $ROOT/builds.tsv.
# Usage (root): .ci/real-agents-e2e-build.sh BIN_DIR ROOT   (BIN_DIR: handlerd, handler-sandbox-podman)
set -euo pipefail
bin="${1:?BIN_DIR}"; root="${2:?ROOT}"
USER_NAME="${HANDLER_TEST_USER:-handler-test}"
HARNESSES="${HANDLER_HARNESSES:-codex claude-code gemini pi vibe}"
port="${HANDLER_E2E_PORT:-$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')}"
mkdir -p "$root/bin"
cp "$bin/handlerd" "$bin/handler-sandbox-podman" "$root/bin/"
chown -R "$USER_NAME:" "$root"
uh="$(getent passwd "$USER_NAME" | cut -d: -f6)"
setpriv --reuid="$USER_NAME" --regid="$USER_NAME" --init-groups env -i HOME="$uh" USER="$USER_NAME" \
    PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin TMPDIR=/var/tmp \
    HANDLER_CONFIG_DIR="$root/config" HANDLER_DATA_DIR="$root/data" HANDLER_CACHE_DIR="$root/cache" \
    HANDLER_STATE_DIR="$root/state" HANDLER_PORT="$port" HANDLER_HARNESSES_DIR="$root/harnesses" \
    HANDLER_TOOLBOX_DIR="$root/toolbox" HANDLER_SANDBOX_COMMAND="$root/bin/handler-sandbox-podman" \
    HANDLER_BUILD_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt \
    "$root/bin/handlerd" >"$root/handlerd.out" 2>"$root/handlerd.log" &
echo $! >"$root/handlerd.pid"
for _ in $(seq 100); do [ -s "$root/config/token" ] && break; sleep 0.3; done
token="$(cat "$root/config/token")"
api() { curl -sS -H "Authorization: Bearer $token" -H 'Content-Type: application/json' "$@"; }
url="http://127.0.0.1:$port"
echo "$port" >"$root/port"
: >"$root/builds.tsv"
for t in toolbox $HARNESSES; do
    id="$(api -X POST "$url/v1/builds" -d "{\"target\":\"$t\"}" | python3 -c 'import json,sys;print(json.load(sys.stdin)["id"])')"
    t0=$SECONDS
    while :; do
        b="$(api "$url/v1/builds/$id")"
        state="$(echo "$b" | python3 -c 'import json,sys;print(json.load(sys.stdin)["state"])')"
        [ "$state" = running ] || break
        sleep 5
    done
    api "$url/v1/builds/$id/log?offset=0" | python3 -c 'import json,sys;print(json.load(sys.stdin)["text"])' >"$root/build-$t.log"
    echo -e "$t\t$state\t$((SECONDS - t0))s\t$(echo "$b" | python3 -c 'import json,sys;print(json.load(sys.stdin).get("error") or "")')" | tee -a "$root/builds.tsv"
done
api "$url/v1/harnesses" >"$root/harnesses.json"
api "$url/v1/toolbox" >"$root/toolbox.json"
