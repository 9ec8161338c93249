#!/usr/bin/env bash
# How long one POST /subscribers takes as their number grows: creates N
# subscribers (default 2,000) one after another on a fresh instance and prints the
# median and p90 of each block of BLOCK creates (default: a quarter of N), in
# milliseconds; then, with all N stored, the median of 50 each of a PATCH, a GET
# of one subscriber and a GET of the first page (50 by name).
#
# Usage:
#   scripts/bench-subscribers.sh [BIN_DIR ...]      # default: target/release, built first
#   N=20000 scripts/bench-subscribers.sh /tmp/before target/release
#   DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench scripts/bench-subscribers.sh
#       # on PostgreSQL: that database must exist and be empty (each run's
#       # subscribers are deleted at its end)
#
# Needs python3 (the client: one keep-alive connection, timing each request).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/common.sh
source scripts/common.sh
N="${N:-2000}"
BLOCK="${BLOCK:-$(((N + 3) / 4))}"
if [ "$#" -eq 0 ]; then
    cargo build --release -p hookbox --bin hookbox
    set -- target/release
fi

echo "| build | creates | median ms | p90 ms |"
echo "|---|---|---|---|"
for bin in "$@"; do
    port="$(free_port)"
    url="http://127.0.0.1:$port"
    work="$(mktemp -d "${TMPDIR:-/tmp}/hookbox-subs.XXXXXX")"
    env -i PATH="$PATH" BIND_ADDR="127.0.0.1:$port" DB_PATH="$work/events.db" \
        ${DATABASE_URL:+DATABASE_URL="$DATABASE_URL"} \
        HANDLERS_DIR="$work/none" SOURCES_DIR="$work/none" LOG_LEVEL=warn \
        "$bin/hookbox" serve >"$work/log" 2>&1 &
    hookbox_pid=$!
    wait_ready
    python3 - "$port" "$N" "$BLOCK" "$bin" "${DATABASE_URL:+clean}" <<'PY'
import http.client, json, statistics, sys, time
port, n, block, label = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
clean = sys.argv[5] == "clean"
conn = http.client.HTTPConnection("127.0.0.1", port)

def timed(method, path, body=None, expect=200):
    start = time.perf_counter()
    conn.request(method, path, body, {"content-type": "application/json"})
    res = conn.getresponse(); res.read()
    took = (time.perf_counter() - start) * 1000
    assert res.status == expect, (method, path, res.status)
    return took

took = []
for i in range(n):
    body = json.dumps({"name": f"sub-{i:06}", "event_types": ["bench.*"],
                       "url": "https://example.com/hook", "secret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
                       "filter": {"payload": {"n": {"$gt": 1}}}})
    took.append(timed("POST", "/subscribers", body, 201))
for at in range(0, n, block):
    part = sorted(took[at:at + block])
    print(f"| {label} | {at + 1}–{at + len(part)} | {statistics.median(part):.1f} | {part[int(len(part) * 0.9)]:.1f} |")
middle = f"/subscribers/sub-{n // 2:06}"
for what, method, path, body in [
    ("PATCH one", "PATCH", middle, json.dumps({"event_types": ["bench.other"]})),
    ("GET one", "GET", middle, None),
    ("GET first page", "GET", "/subscribers", None),
]:
    runs = sorted(timed(method, path, body) for _ in range(50))
    print(f"| {label} | {what} (of {n}) | {statistics.median(runs):.1f} | {runs[int(len(runs) * 0.9)]:.1f} |")
for i in range(n if clean else 0):
    timed("DELETE", f"/subscribers/sub-{i:06}", None, 204)
PY
    kill "$hookbox_pid"
    wait "$hookbox_pid" || true
    rm -rf "$work"
done
