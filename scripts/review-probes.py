#!/usr/bin/env python3
"""Issue 27's review, measured again on the real binary (items 7, 9 and 11).

Each probe starts its own hookbox (a release build) in a temporary folder on
127.0.0.1, does what the review did, and prints a table:

  stalled   1,500 connections each send 1 MB of a 1 MiB body (MAX_BODY_BYTES)
            and stop (item 7):
            RSS before, with them open, and 1 s, 10 s and 30 s after they close;
            how many got 503.
  replay    200,000 dead letters (a receiver that answers 400), then
            `POST /dead-letters/replay` with the destination paused (item 9):
            how long the request took, and intake's latency and statuses while
            it ran (one probe event every 20 ms).
  poll      a poll upstream whose first page holds 300,000 items (8.6 MB; item
            8): how long until all are stored, intake's latency and statuses
            meanwhile, RSS at its peak, the longest line hookbox logged.
  forged    5 signed requests hookbox refuses after verifying them, then 7,000
            forged ones with 2 KB bodies from 16 connections (item 11): RSS and
            database growth, the listing's size and count, whether the 5
            verified refusals are still listed.

Usage:
  scripts/review-probes.py stalled|replay|poll|forged [HOOKBOX_BIN] [LOADGEN_BIN]

PERF_OUT=FILE (replay): `perf record -g` of hookbox while the replay runs.
HOOKBOX_BIN and LOADGEN_BIN default to target/release/{hookbox,loadgen}; build
them with `cargo build --release --workspace`. Nothing leaves 127.0.0.1.
"""

import asyncio
import hashlib
import hmac
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def dir_mib(path):
    total = 0
    for name in os.listdir(path):
        total += os.path.getsize(os.path.join(path, name))
    return total / (1 << 20)


class Hookbox:
    """A hookbox process in a folder of its own."""

    def __init__(self, binary, env=None, sources=None):
        self.dir = tempfile.mkdtemp(prefix="hookbox-probe-")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        os.makedirs(os.path.join(self.dir, "sources"))
        for name, text in (sources or {}).items():
            with open(os.path.join(self.dir, "sources", f"{name}.toml"), "w") as f:
                f.write(text)
        full_env = {
            "PATH": os.environ.get("PATH", ""),
            "BIND_ADDR": f"127.0.0.1:{self.port}",
            "DB_PATH": os.path.join(self.dir, "data", "events.db"),
            "LOG_LEVEL": "warn",
        }
        # Allocator settings to try pass through (jemalloc's _RJEM_MALLOC_CONF, or
        # MIMALLOC_* for a build with mimalloc).
        full_env.update({k: v for k, v in os.environ.items()
                         if k.startswith(("MIMALLOC_", "_RJEM_MALLOC_CONF"))})
        full_env.update(env or {})
        self.log = open(os.path.join(self.dir, "hookbox.log"), "w")
        self.proc = subprocess.Popen(
            [binary], cwd=self.dir, env=full_env, stdout=self.log, stderr=self.log
        )
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                if self.request("GET", "/health")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise SystemExit(f"hookbox did not start; see {self.dir}/hookbox.log")

    def request(self, method, path, body=None, headers=None, timeout=60):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def metric(self, name):
        _, text = self.request("GET", "/metrics")
        for line in text.decode().splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    def rss(self):
        return rss_mib(self.proc.pid)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


class IntakeProbe:
    """Posts one event to `/webhooks` every 20 ms until stopped."""

    def __init__(self, hb):
        self.hb, self.latencies, self.statuses = hb, [], {}
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.run)
        self.thread.start()

    def run(self):
        n = 0
        while not self.done.is_set():
            n += 1
            start = time.time()
            try:
                status, _ = self.hb.request(
                    "POST", "/webhooks", {"event_type": "probe.live", "payload": {"n": n}},
                    timeout=120)
            except OSError:
                status = "error"
            self.latencies.append(time.time() - start)
            self.statuses[status] = self.statuses.get(status, 0) + 1
            time.sleep(max(0, 0.02 - (time.time() - start)))

    def stop(self):
        self.done.set()
        self.thread.join()

    def rows(self):
        ordered = sorted(self.latencies) or [float("nan")]
        at = lambda q: ordered[min(len(ordered) - 1, int(len(ordered) * q))] * 1000
        return [
            ("intake probes meanwhile (one every 20 ms)", f"{len(self.latencies)} {self.statuses}"),
            ("intake probe p50 / p99 / max", f"{at(0.5):.1f} / {at(0.99):.1f} / {ordered[-1] * 1000:.1f} ms"),
        ]


def table(rows):
    width = max(len(k) for k, _ in rows)
    print(f"| {'measure'.ljust(width)} | value |")
    print(f"|{'-' * (width + 2)}|-------|")
    for k, v in rows:
        print(f"| {k.ljust(width)} | {v} |")


# ---------------------------------------------------------------- item 7


def stalled(hookbox_bin, _loadgen):
    connections, sent, declared = 1500, 1_000_000, 1 << 20
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < connections + 100:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, connections + 100), hard))
    hb = Hookbox(hookbox_bin)
    host = ("127.0.0.1", hb.port)
    before = hb.rss()
    chunk = b"x" * 50_000
    head = (
        f"POST /webhooks HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {declared}\r\n\r\n"
    ).encode()
    socks = []
    for _ in range(connections):
        s = socket.create_connection(host)
        s.settimeout(2)
        try:
            s.sendall(head)
            for _ in range(sent // len(chunk)):
                s.sendall(chunk)
        except OSError:
            pass  # refused: hookbox answered and stopped reading
        socks.append(s)
    time.sleep(1)
    peak = hb.rss()
    refused = 0
    for s in socks:
        s.setblocking(False)
        try:
            if s.recv(64).startswith(b"HTTP/1.1 503"):
                refused += 1
        except OSError:
            pass
        s.close()
    after = {}
    start = time.time()
    for mark in (1, 10, 30):
        time.sleep(max(0, start + mark - time.time()))
        after[mark] = hb.rss()
    status, _ = hb.request("POST", "/webhooks", {"event_type": "after", "payload": {}})
    hb.stop()
    table(
        [
            ("connections (1 MB of a 1 MiB body each)", f"{connections:,}"),
            ("answered 503", f"{refused:,}"),
            ("RSS before", f"{before:.1f} MiB"),
            ("RSS with them open", f"{peak:.1f} MiB"),
            ("RSS 1 s after they closed", f"{after[1]:.1f} MiB"),
            ("RSS 10 s after", f"{after[10]:.1f} MiB"),
            ("RSS 30 s after", f"{after[30]:.1f} MiB"),
            ("intake afterwards", str(status)),
        ]
    )


# ---------------------------------------------------------------- item 9


async def refuse(reader, writer):
    """A receiver that answers every request 400 at once (keep-alive)."""
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            await reader.readexactly(length)
            writer.write(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        writer.close()


def serve_refusals(port):
    async def main():
        server = await asyncio.start_server(refuse, "127.0.0.1", port)
        async with server:
            await server.serve_forever()

    threading.Thread(target=lambda: asyncio.run(main()), daemon=True).start()


def replay(hookbox_bin, loadgen_bin, dead=200_000):
    receiver = free_port()
    serve_refusals(receiver)
    hb = Hookbox(hookbox_bin, {"ALLOWED_TARGETS": "127.0.0.0/8"})
    status, body = hb.request(
        "POST",
        "/subscribers",
        {
            "name": "refuser",
            "event_types": ["probe.dead"],
            "url": f"http://127.0.0.1:{receiver}/",
            "max_attempts": 1,
            "max_in_flight": 64,
        },
    )
    assert status == 201, (status, body)
    t0 = time.time()
    subprocess.run(
        [loadgen_bin, "fill", "--url", hb.url, "--events", str(dead),
         "--event-type", "probe.dead", "--payload-bytes", "256"],
        check=True, stdout=subprocess.DEVNULL,
    )
    while hb.metric("hookbox_dead_letters") < dead:
        if time.time() - t0 > 900:
            raise SystemExit(f"only {hb.metric('hookbox_dead_letters'):.0f} dead letters after 900 s")
        time.sleep(1)
    filled = time.time() - t0
    if os.environ.get("PAUSE", "1") == "1":
        # Replayed work waits (the destination would refuse it again): the
        # replay's own cost, not the deliveries'.
        hb.request("POST", "/destinations/refuser/pause", {})
    intake = IntakeProbe(hb)
    time.sleep(1)
    perf = None
    if os.environ.get("PERF_OUT"):
        # A profile of hookbox during the replay, for `perf report -i $PERF_OUT`.
        perf = subprocess.Popen(["perf", "record", "-g", "-p", str(hb.proc.pid),
                                 "-o", os.environ["PERF_OUT"]], stderr=subprocess.DEVNULL)
        time.sleep(0.5)
    start = time.time()
    status, body = hb.request("POST", "/dead-letters/replay", {}, timeout=600)
    took = time.time() - start
    if perf:
        perf.send_signal(2)
        perf.wait()
    intake.stop()
    rss = hb.rss()
    hb.stop()
    table(
        [
            ("dead letters", f"{dead:,} (filled in {filled:.0f} s)"),
            ("replay answer", f"{status} {body.decode()[:60]}"),
            ("replay request took", f"{took:.2f} s"),
            *intake.rows(),
            ("RSS after", f"{rss:.1f} MiB"),
        ]
    )


# ---------------------------------------------------------------- item 8


def serve_pages(port, total):
    """A poll upstream: `GET /?after=K` answers every item after K (ids 1..total)."""
    import http.server
    import urllib.parse

    class Pages(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):
            query = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query)
            after = int(query.get("after", ["0"])[0])
            items = ",".join(f'{{"id":{n},"type":"t","v":"{n:08}"}}' for n in range(after + 1, total + 1))
            body = f'{{"data":[{items}]}}'.encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Pages)
    threading.Thread(target=server.serve_forever, daemon=True).start()


def poll(hookbox_bin, _loadgen, total=300_000):
    upstream = free_port()
    serve_pages(upstream, total)
    manifest = (
        'kind = "poll"\n[poll]\n'
        f'url = "http://127.0.0.1:{upstream}/"\ncursor_param = "after"\n'
        'items = "/data"\ninterval = "1s"\n'
    )
    first = len(",".join(f'{{"id":{n},"type":"t","v":"{n:08}"}}' for n in range(1, total + 1)))
    hb = Hookbox(hookbox_bin, sources={"ledger": manifest})
    intake = IntakeProbe(hb)
    start, peak = time.time(), 0.0
    stored = 0
    while stored < total and time.time() - start < 600:
        peak = max(peak, hb.rss())
        _, body = hb.request("GET", "/sources")
        listed = json.loads(body)
        items = listed if isinstance(listed, list) else listed.get("items", [])
        stored = sum(int(s.get("accepted", 0)) for s in items if s.get("name") == "ledger")
        time.sleep(0.1)
    took = time.time() - start
    intake.stop()
    hb.stop()
    with open(os.path.join(hb.dir, "hookbox.log")) as f:
        longest = max((len(line) for line in f), default=0)
    table(
        [
            ("first page", f"{total:,} items, {first / 1e6:.1f} MB"),
            ("stored", f"{stored:,} in {took:.1f} s"),
            *intake.rows(),
            ("RSS at its peak (sampled every 0.1 s)", f"{peak:.1f} MiB"),
            ("longest log line", f"{longest:,} bytes"),
        ]
    )


# ---------------------------------------------------------------- item 11


def forged(hookbox_bin, _loadgen, count=7000, threads=16):
    secret = "probe-secret-0123456789"
    hb = Hookbox(
        hookbox_bin,
        {"GITHUB_SECRET": secret},
        {"github": 'kind = "github"\nsecret_env = "GITHUB_SECRET"\n'},
    )
    data_dir = os.path.join(hb.dir, "data")
    real = []
    for i in range(5):
        body = json.dumps({"zen": f"real {i}"}).encode()
        sig = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
        # Signed, but without X-GitHub-Event: verified, then refused (no type).
        status, _ = raw_post(hb.port, "/ingest/github", body,
                             {"X-Hub-Signature-256": sig, "X-GitHub-Delivery": f"real-{i}"})
        real.append(status)
    before_rss, before_db = hb.rss(), dir_mib(data_dir)
    junk = json.dumps({"junk": "x" * 2000}).encode()
    statuses = {}
    lock = threading.Lock()

    def flood(n):
        s = socket.create_connection(("127.0.0.1", hb.port))
        for i in range(n):
            head = (
                f"POST /ingest/github HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                f"Content-Type: application/json\r\nX-GitHub-Event: push\r\n"
                f"X-GitHub-Delivery: forged-{threading.get_ident()}-{i}\r\n"
                f"X-Hub-Signature-256: sha256={'0' * 64}\r\n"
                f"Content-Length: {len(junk)}\r\n\r\n"
            ).encode()
            s.sendall(head + junk)
            status = read_status(s)
            with lock:
                statuses[status] = statuses.get(status, 0) + 1
        s.close()

    intake = IntakeProbe(hb)
    start = time.time()
    shares = [count // threads + (1 if t < count % threads else 0) for t in range(threads)]
    workers = [threading.Thread(target=flood, args=(n,)) for n in shares]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    took = time.time() - start
    intake.stop()
    time.sleep(1)
    after_rss, after_db = hb.rss(), dir_mib(data_dir)
    status, listing = hb.request("GET", "/sources/github/rejected")
    entries = json.loads(listing)
    items = entries if isinstance(entries, list) else entries.get("items", entries.get("rejected", []))
    verified = [e for e in items if e.get("reason") != "signature"]
    hb.stop()
    table(
        [
            ("verified refusals first (statuses)", str(real)),
            ("forged requests", f"{sum(statuses.values()):,} in {took:.1f} s {statuses}"),
            *intake.rows(),
            ("RSS before / after", f"{before_rss:.1f} / {after_rss:.1f} MiB"),
            ("database files before / after", f"{before_db:.1f} / {after_db:.1f} MiB"),
            ("listing", f"{status}, {len(listing) / (1 << 20):.2f} MiB, {len(items)} entries"),
            ("verified refusals still listed", f"{len(verified)} of {len(real)}"),
        ]
    )


def raw_post(port, path, body, headers):
    s = socket.create_connection(("127.0.0.1", port))
    extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    s.sendall(
        (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
         f"{extra}Content-Length: {len(body)}\r\n\r\n").encode() + body
    )
    status = read_status(s)
    s.close()
    return status, None


def read_status(s):
    """Reads one response (head and Content-Length body) and returns its status."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        part = s.recv(65536)
        if not part:
            return "closed"
        buf += part
    head, rest = buf.split(b"\r\n\r\n", 1)
    length = 0
    for line in head.split(b"\r\n")[1:]:
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    while len(rest) < length:
        part = s.recv(65536)
        if not part:
            return "closed"
        rest += part
    return int(head.split(b" ")[1])


def main():
    probes = {"stalled": stalled, "replay": replay, "poll": poll, "forged": forged}
    if len(sys.argv) < 2 or sys.argv[1] not in probes:
        print(__doc__.strip(), file=sys.stderr)
        sys.exit(2)
    hookbox_bin = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "target/release/hookbox")
    loadgen_bin = sys.argv[3] if len(sys.argv) > 3 else os.path.join(ROOT, "target/release/loadgen")
    probes[sys.argv[1]](hookbox_bin, loadgen_bin)


if __name__ == "__main__":
    main()
