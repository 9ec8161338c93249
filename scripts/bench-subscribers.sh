#!/usr/bin/env bash
# How long one POST /subscribers takes as their number grows: creates N
# subscribers (default 2,000) one after another on a fresh instance and prints the
# median and p90 of each block of 500 creates, in milliseconds.
#
# Usage:
#   scripts/bench-subscribers.sh [BIN_DIR ...]      # default: target/release, built first
#   N=4000 scripts/bench-subscribers.sh /tmp/before target/release
#
# Needs python3 (the client: one keep-alive connection, timing each request).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
N="${N:-2000}"
if [ "$#" -eq 0 ]; then
    cargo build --release -p hookbox --bin hookbox
    set -- target/release
fi

for bin in "$@"; do
    port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
    work="$(mktemp -d "${TMPDIR:-/tmp}/hookbox-subs.XXXXXX")"
    env -i PATH="$PATH" BIND_ADDR="127.0.0.1:$port" DB_PATH="$work/events.db" \
        HANDLERS_DIR="$work/none" SOURCES_DIR="$work/none" LOG_LEVEL=warn \
        "$bin/hookbox" serve >"$work/log" 2>&1 &
    pid=$!
    for _ in $(seq 100); do
        curl -fs "http://127.0.0.1:$port/ready" >/dev/null 2>&1 && break
        sleep 0.1
    done
    python3 - "$port" "$N" "$bin" <<'PY'
import http.client, json, statistics, sys, time
port, n, label = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
conn = http.client.HTTPConnection("127.0.0.1", port)
took = []
for i in range(n):
    body = json.dumps({"name": f"sub-{i:06}", "event_types": ["bench.*"],
                       "url": "https://example.com/hook", "secret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
                       "filter": {"payload": {"n": {"$gt": 1}}}})
    start = time.perf_counter()
    conn.request("POST", "/subscribers", body, {"content-type": "application/json"})
    res = conn.getresponse(); res.read()
    took.append((time.perf_counter() - start) * 1000)
    assert res.status == 201, res.status
for at in range(0, n, 500):
    block = sorted(took[at:at + 500])
    print(f"| {label} | {at + 1}–{at + len(block)} | {statistics.median(block):.1f} | {block[int(len(block) * 0.9)]:.1f} |")
PY
    kill "$pid"
    wait "$pid" || true
    rm -rf "$work"
done
