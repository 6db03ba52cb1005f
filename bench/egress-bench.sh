#!/bin/sh
# Egress proxy benchmarks (issue 6), ratios measured side by side in one run:
#   1. bulk download through a relayed tunnel ÷ direct, on this machine (goal ≥ 0.9), and
#      injected HTTPS requests per second with keep-alive (goal ≥ 1,000 per core):
#      the ignored test handler-core/tests/egress_bench.rs, in release;
#   2. the proxy's resident memory idle and with 100 open tunnels (goal ≤ 8 MB, ≤ 32 MB): the
#      static proxy binary ($HANDLER_EGRESS_PROXY_BIN, else built by
#      fixtures/egress/build-static-proxy.sh) as its own process.
# Usage: bench/egress-bench.sh   (from the workspace root)
set -eu
ws="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ws"
if [ "${EGRESS_BENCH_ONLY_START:-}" != 1 ]; then
echo "== throughput and injected requests (release)"
cargo test --release -p handler-core --test egress_bench -- --ignored --nocapture 2>&1 | grep -E "bulk download|injected HTTPS|first answer" || true

bin="${HANDLER_EGRESS_PROXY_BIN:-$(fixtures/egress/build-static-proxy.sh "$ws")}"
echo "== proxy memory ($bin)"
python3 - "$bin" <<'PY'
import json, os, socket, subprocess, sys, tempfile, threading, time
bin = sys.argv[1]
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(512)
port = srv.getsockname()[1]
conns = []
def accept():
    while True:
        c, _ = srv.accept(); conns.append(c)
threading.Thread(target=accept, daemon=True).start()
d = tempfile.mkdtemp()
settings = os.path.join(d, "settings.json")
open(settings, "w").write(json.dumps({"enforcement": "enforce", "allow": [f"127.0.0.1:{port}"]}))
sock = os.path.join(d, "proxy.sock")
cfg = {"mode": "filter", "listen": "127.0.0.1:0", "listenUnix": sock, "settingsFile": settings, "rootsFiles": []}
p = subprocess.Popen([bin], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
p.stdin.write(json.dumps(cfg).encode()); p.stdin.close()
ready = json.loads(p.stdout.readline())
host, pport = ready["listen"].rsplit(":", 1)
def rss():
    for l in open(f"/proc/{p.pid}/status"):
        if l.startswith("VmRSS:"): return int(l.split()[1]) / 1024
time.sleep(0.5)
idle = rss()
tunnels = []
def tunnel(s):
    s.sendall(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
    assert s.recv(4096).startswith(b"HTTP/1.1 200"), "tunnel refused"
    s.sendall(b"x" * 1024)
    tunnels.append(s)
for i in range(100):
    tunnel(socket.create_connection((host, int(pport))))
time.sleep(0.5)
busy = rss()
# A sandbox's tunnels come over the unix socket, each relayed by two threads (decision 0176).
for i in range(100):
    u = socket.socket(socket.AF_UNIX); u.connect(sock); tunnel(u)
time.sleep(0.5)
busy_unix = rss()
print(f"proxy resident memory: idle {idle:.1f} MiB, with 100 open tunnels {busy:.1f} MiB, and 100 more over its unix socket {busy_unix:.1f} MiB")
p.terminate(); p.wait()
PY
fi

# 3. Start time of a filtered sandbox ÷ one without network (goal ≤ 1.6×): `launch` of `echo`
#    (to its first byte on stdout, and to exit)
#    in the busybox test image, alternated runs, as the unprivileged test user when run as root
#    (the image built by .ci/setup-podman.sh, the network filter by `image build-proxy`).
hsp="${HANDLER_SANDBOX_PODMAN:-${CARGO_TARGET_DIR:-$ws/target}/release/handler-sandbox-podman}"
[ -x "$hsp" ] || cargo build --release -p handler-bins --bin handler-sandbox-podman >&2
echo "== start time, filtered ÷ none ($hsp)"
python3 - "$hsp" "${EGRESS_BENCH_RUNS:-5}" <<'PY'
import json, os, shutil, statistics, subprocess, sys, tempfile, time
hsp, runs = sys.argv[1], int(sys.argv[2])
d = tempfile.mkdtemp(prefix="egress-bench-", dir="/tmp"); os.chmod(d, 0o755)
exe = os.path.join(d, "handler-sandbox-podman"); shutil.copy(hsp, exe); os.chmod(exe, 0o755)
user = os.environ.get("HANDLER_TEST_USER", "handler-test")
def spec(name, network):
    s = {"apiVersion": "handler.sandbox/v1", "name": name, "image": "localhost/handler-test-busybox",
         "argv": ["echo", "up"], "env": {}, "workdir": "/tmp",
         "user": {"mode": "host-user", "home": f"/home/{user}"}, "mounts": [], "files": [],
         "writablePaths": [], "network": network}
    p = os.path.join(d, name + ".json"); open(p, "w").write(json.dumps(s)); os.chmod(p, 0o644)
    return p
def launch(path, pool=1):
    cmd = f"exec {exe} launch 3<{path}"
    if os.geteuid() == 0:
        argv = ["setpriv", "--reuid", user, "--regid", user, "--init-groups", "env", "-i", "-C", "/tmp",
                f"HOME=/home/{user}", f"USER={user}", "PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
                f"HANDLER_PROXY_POOL={pool}", "sh", "-c", cmd]
    else:
        argv = ["env", f"HANDLER_PROXY_POOL={pool}", "sh", "-c", cmd]
    t = time.monotonic()
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = p.stdout.read(1)
    up = time.monotonic() - t
    p.stdout.read(); err = p.stderr.read(); p.wait()
    total = time.monotonic() - t
    assert p.returncode == 0 and first == b"u", err.decode()
    return up, total
none = spec("egbench-none", {"mode": "none"})
filt = spec("egbench-filtered", {"mode": "filtered", "allow": ["example.com:443"], "enforcement": "enforce"})
# The warm pool (decision 0175) refills a second after each filtered launch: the runs are spaced
# (EGRESS_BENCH_GAP seconds) as an agent's starts are, and the same spacing is kept for each.
gap = float(os.environ.get("EGRESS_BENCH_GAP", "2.5"))
launch(none); launch(filt, 0); launch(filt); time.sleep(gap)  # warm caches and the pool
a, b, c = [], [], []
for _ in range(runs):
    a.append(launch(none)); time.sleep(gap)
    b.append(launch(filt, 0)); time.sleep(gap)
    c.append(launch(filt)); time.sleep(gap)
for i, what in ((0, "launch to the process's first byte"), (1, "launch to exit (teardown included)")):
    ma = statistics.median(x[i] for x in a); mb = statistics.median(x[i] for x in b)
    mc = statistics.median(x[i] for x in c)
    print(f"{what}, median of {runs}: none {ma:.3f} s, filtered without a pool {mb:.3f} s "
          f"({mb/ma:.2f}x), filtered with a warm proxy {mc:.3f} s ({mc/ma:.2f}x)")
shutil.rmtree(d)
PY
