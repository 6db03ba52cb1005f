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
echo "== throughput and injected requests (release)"
cargo test --release -p handler-core --test egress_bench -- --ignored --nocapture 2>&1 | grep -E "bulk download|injected HTTPS" || true

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
cfg = {"mode": "filter", "listen": "127.0.0.1:0", "settingsFile": settings, "rootsFiles": []}
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
for i in range(100):
    s = socket.create_connection((host, int(pport)))
    s.sendall(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
    assert s.recv(4096).startswith(b"HTTP/1.1 200"), "tunnel refused"
    s.sendall(b"x" * 1024)
    tunnels.append(s)
time.sleep(0.5)
busy = rss()
print(f"proxy resident memory: idle {idle:.1f} MiB, with 100 open tunnels {busy:.1f} MiB")
p.terminate(); p.wait()
PY
