#!/usr/bin/env bash
# Benchmark (not a test): launch-to-first-byte of a `none` sandbox through handler-sandbox-podman
# (or, with HANDLER_BENCH_ENGINE=docker, handler-sandbox-docker) against a bare `podman run`
# (`docker run`) of the same image and command, measured in the same run, reported side by side
# as a ratio (goal <= 1.15x). Run as root (switches to $HANDLER_TEST_USER, default handler-test,
# prepared by .ci/setup-podman.sh and .ci/setup-docker.sh) or as the unprivileged user itself.
#   bench/sandbox-start.sh [ROUNDS]      (default 15; release binary built if missing;
#   HANDLER_BENCH_PROFILE=debug uses the debug build)
set -euo pipefail
ROUNDS="${1:-15}"
IMAGE="${HANDLER_BENCH_IMAGE:-localhost/handler-test-busybox:latest}"
USER_NAME="${HANDLER_TEST_USER:-handler-test}"
cd "$(dirname "$0")/.."
ENGINE="${HANDLER_BENCH_ENGINE:-podman}"
PROFILE="${HANDLER_BENCH_PROFILE:-release}"
EXE="handler-sandbox-$ENGINE"
TARGET="${CARGO_TARGET_DIR:-target}"
if [ ! -x "$TARGET/$PROFILE/$EXE" ]; then
    if [ "$PROFILE" = release ]; then flag=--release; else flag=; fi
    cargo build $flag -p handler-bins --bin "$EXE" >&2
fi
WORK="$(mktemp -d /tmp/handler-bench-XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
cp "$TARGET/$PROFILE/$EXE" "$WORK/"
mkdir "$WORK/scope"
chmod 755 "$WORK"
if [ "$(id -u)" -eq 0 ]; then
    chown -R "$USER_NAME" "$WORK"
    UHOME="$(getent passwd "$USER_NAME" | cut -d: -f6)"
    AS=(setpriv --reuid="$USER_NAME" --regid="$USER_NAME" --init-groups env -i HOME="$UHOME" USER="$USER_NAME" PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin)
else
    AS=()
fi
cat > "$WORK/bench.py" <<'PY'
import json, os, statistics, subprocess, sys, time
rounds, image, work, engine = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
scope = f"{work}/scope"
def first_byte(argv, spec=None):
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    b = p.stdout.read(1)
    t = time.perf_counter() - t0
    p.stdout.read(); p.wait()
    assert b == b"x", (argv, b, p.returncode)
    return t
def spec(i):
    s = {"apiVersion": "handler.sandbox/v1", "name": f"handler-bench-{os.getpid()}-{i}", "image": image,
         "argv": ["echo", "x"], "env": {}, "workdir": scope, "user": {"mode": "host-user", "home": "/home/agent"},
         "mounts": [{"source": scope, "target": scope, "readOnly": False, "kind": "scope"}],
         "files": [], "writablePaths": [], "network": {"mode": "none"}}
    path = f"{work}/spec-{i}.json"
    with open(path, "w") as f: json.dump(s, f)
    return path
bare = [engine, "run", "--rm", "-i", "--pull=never", "--network", "none", image, "echo", "x"]
first_byte(bare)  # warm up
bare_t, launch_t = [], []
for i in range(rounds):
    bare_t.append(first_byte(bare))
    launch_t.append(first_byte(["sh", "-c", 'exec "$0" launch 3<"$1"', f"{work}/handler-sandbox-{engine}", spec(i)]))
mb, ml = statistics.median(bare_t), statistics.median(launch_t)
print(f"rounds: {rounds}, image: {image}")
print(f"bare {engine} run       median {mb*1000:7.1f} ms   min {min(bare_t)*1000:7.1f} ms")
print(f"handler-sandbox launch median {ml*1000:7.1f} ms   min {min(launch_t)*1000:7.1f} ms")
print(f"ratio (median): {ml/mb:.2f}x   (goal <= 1.15x)")
PY
"${AS[@]}" python3 "$WORK/bench.py" "$ROUNDS" "$IMAGE" "$WORK" "$ENGINE"
