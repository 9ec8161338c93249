#!/usr/bin/env bash
# Soak hookbox: an hour (by default) at half of its peak intake, every event
# delivered to one subscriber whose receiver answers 500 to 10 % of the attempts,
# on SQLite or PostgreSQL; the server sampled at every interval, and the run judged
# against stated bounds (issue 28 item 5; docs/benchmarks.md, "Soak").
#
# Usage:
#   scripts/soak.sh sqlite [DURATION]            # DURATION: 1h (default), 90m, 3m, 600s
#   PG_SERVER=private scripts/soak.sh postgres   # a throwaway cluster, autovacuum on
#   scripts/soak.sh postgres                     # PG_SERVER, DATABASE_URL's server, or
#                                                # postgres://postgres@127.0.0.1:5432
#   RATE=2000 scripts/soak.sh sqlite 10m         # a given rate: no peak search
#
# 1. Builds hookbox and loadgen in release mode into ${CARGO_TARGET_DIR:-target}
#    (CARGO_BUILD_JOBS limits the jobs), or takes them from BENCH_BIN_DIR, and copies
#    them aside so that another build cannot swap them mid-run.
# 2. Starts hookbox on 127.0.0.1 (a free port) with ALLOWED_TARGETS=127.0.0.0/8,
#    a retention of 2 minutes (RETENTION_DAYS=0.00138889) run every minute
#    (CLEANUP_INTERVAL_HOURS=0.0166667) so that an hour's events never pile up on
#    disk (both can be overridden from the environment), no handler manifests.
# 3. Finds the peak, PEAK_DURATION (20s) each, CONNECTIONS (64) connections:
#    `loadgen ingest` alone (an unrouted event type), then `loadgen ingest` of the
#    soak's event type while `loadgen soak --rate 1` holds the subscriber and its
#    failing receiver (intake while delivering). A peak is the 2xx answers per
#    second; the soak's rate is half of the lower one (or RATE).
# 4. Restarts hookbox on a fresh database and runs `loadgen soak` at that rate for
#    DURATION over CONNECTIONS connections, FAIL_PERCENT (10) % of the attempts
#    refused; meanwhile every SAMPLE seconds (60; for runs under 20 minutes a
#    twelfth of the run, at least 5 s) it records hookbox's RSS (VmRSS) and CPU time
#    from /proc, the backlog (`hookbox_events_pending` from /metrics), and on SQLite
#    the database and WAL file sizes, on PostgreSQL the database's size, each
#    table's live and dead tuples, table and index sizes and autovacuum runs
#    (pg_stat_user_tables), the WAL written (pg_current_wal_lsn's advance) and the
#    size of pg_wal. loadgen's rows give p50, p99 and how late requests left.
# 5. Prints one Markdown table row per sample and one verdict line per bound (the
#    bounds and their reasons: docs/benchmarks.md, "Soak"), keeps the raw samples in
#    SOAK_OUT (default ${TMPDIR:-/tmp}/hookbox-soak-BACKEND-DATE), and exits 1 if a
#    bound failed (or loadgen did: a backlog not drained 5 minutes after the run).
#
# PostgreSQL: PG_SERVER=private runs initdb in a temporary directory (as the
# postgres user when run as root), starts that cluster with stock settings
# (autovacuum on) on a free port of 127.0.0.1 and removes it at exit; otherwise the
# server of PG_SERVER, of DATABASE_URL, or 127.0.0.1:5432 must accept CREATE
# DATABASE, and the databases hookbox_soak_<time>_<pid>[_peak] are dropped at exit.
# A server with autovacuum off (as this machine's CI server is) fails the dead-tuple
# bounds by design: that is what they watch. LOG_LEVEL defaults to warn; hookbox's
# log is kept in SOAK_OUT.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/common.sh
source scripts/common.sh

backend="${1:-}"
duration_arg="${2:-1h}"
if [[ "$backend" != sqlite && "$backend" != postgres ]]; then
    echo "usage: scripts/soak.sh sqlite|postgres [DURATION, e.g. 1h, 3m, 600s]" >&2
    exit 2
fi
for tool in cargo curl python3; do
    command -v "$tool" >/dev/null || { echo "soak.sh: $tool is required" >&2; exit 1; }
done

# `seconds DURATION`: 1h, 90m, 600s or 600 as seconds.
seconds() {
    local n="${1%[hms]}"
    if [[ ! "$n" =~ ^[0-9]+$ || "$n" -eq 0 ]]; then
        echo "soak.sh: cannot read the duration '$1' (e.g. 1h, 3m, 600s)" >&2
        exit 2
    fi
    case "$1" in
        *h) echo $((n * 3600)) ;;
        *m) echo $((n * 60)) ;;
        *) echo "$n" ;;
    esac
}
duration="$(seconds "$duration_arg")"
peak_duration="$(seconds "${PEAK_DURATION:-20s}")"
connections="${CONNECTIONS:-64}"
fail_percent="${FAIL_PERCENT:-10}"
if [[ -n "${SAMPLE:-}" ]]; then
    sample="$(seconds "$SAMPLE")"
elif ((duration >= 1200)); then
    sample=60
else
    sample=$((duration / 12 > 5 ? duration / 12 : 5))
fi
samples=$((duration / sample))
if ((samples < 4)); then
    echo "soak.sh: $duration s at one sample every $sample s is fewer than 4 samples" >&2
    exit 2
fi
retention_days="${RETENTION_DAYS:-0.00138889}"
cleanup_hours="${CLEANUP_INTERVAL_HOURS:-0.0166667}"

if [[ -n "${BENCH_BIN_DIR:-}" ]]; then
    bins="$BENCH_BIN_DIR"
else
    echo "soak.sh: building (release)" >&2
    cargo build --release -p hookbox -p loadgen --bin hookbox --bin loadgen
    bins="${CARGO_TARGET_DIR:-target}/release"
fi
workdir="$(mktemp -d "${TMPDIR:-/tmp}/hookbox-soak.XXXXXX")"
cp "$bins/hookbox" "$bins/loadgen" "$workdir/"
mkdir "$workdir/handlers"
out="${SOAK_OUT:-${TMPDIR:-/tmp}/hookbox-soak-$backend-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$out"
log="$out/hookbox.log"

hookbox_pid=""
loadgen_pid=""
helper_pid=""
pgdir=""
pg_bin=""
as_pg=()
server=""
databases=()

# `stop PID`: SIGTERM, then SIGKILL after 20 s.
stop() {
    local pid="$1"
    [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 200); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}

cleanup() {
    local status=$?
    stop "$helper_pid"
    stop "$loadgen_pid"
    stop "$hookbox_pid"
    if [[ $status -ne 0 && -s "$log" ]]; then
        echo "soak.sh: last lines of the hookbox log ($log):" >&2
        tail -n 20 "$log" >&2
    fi
    if [[ -n "$server" && -z "$pgdir" ]]; then
        for db in "${databases[@]}"; do
            psql "$server/postgres" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
        done
    fi
    if [[ -n "$pgdir" ]]; then
        "${as_pg[@]}" "$pg_bin/pg_ctl" -D "$pgdir/data" -m fast -w stop >/dev/null 2>&1 || true
        rm -rf "$pgdir"
    fi
    rm -rf "$workdir"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM


# PG_SERVER=private: initdb in a temporary directory, stock settings, a free port.
start_private_pg() {
    if command -v pg_config >/dev/null && [[ -x "$(pg_config --bindir)/initdb" ]]; then
        pg_bin="$(pg_config --bindir)"
    elif command -v initdb >/dev/null; then
        pg_bin="$(dirname "$(readlink -f "$(command -v initdb)")")"
    else
        pg_bin="$(find /usr/lib/postgresql -maxdepth 2 -name bin -type d 2>/dev/null | sort -V | tail -n 1)"
    fi
    if [[ -z "$pg_bin" || ! -x "$pg_bin/initdb" ]]; then
        echo "soak.sh: PG_SERVER=private needs PostgreSQL's initdb and pg_ctl" >&2
        exit 1
    fi
    pgdir="$(mktemp -d "${TMPDIR:-/tmp}/hookbox-soak-pg.XXXXXX")"
    if [[ $EUID -eq 0 ]]; then
        # initdb refuses to run as root.
        chown postgres: "$pgdir"
        as_pg=(runuser -u postgres --)
    fi
    "${as_pg[@]}" "$pg_bin/initdb" -D "$pgdir/data" -U postgres --auth=trust -E UTF8 \
        >"$pgdir/initdb.log" 2>&1 || { cat "$pgdir/initdb.log" >&2; exit 1; }
    local port
    port="$(free_port)"
    "${as_pg[@]}" "$pg_bin/pg_ctl" -D "$pgdir/data" -l "$pgdir/server.log" -w \
        -o "-p $port -c listen_addresses=127.0.0.1 -k $pgdir" start >/dev/null \
        || { cat "$pgdir/server.log" >&2; exit 1; }
    server="postgres://postgres@127.0.0.1:$port"
}

# `sql DB QUERY`: the rows, tab-separated.
sql() {
    psql "$server/$1" -qAtX -F $'\t' -c "$2"
}

db_base="hookbox_soak_$(date +%s)_$$"
if [[ "$backend" == postgres ]]; then
    command -v psql >/dev/null || { echo "soak.sh: psql is required" >&2; exit 1; }
    if [[ "${PG_SERVER:-}" == private ]]; then
        start_private_pg
    elif [[ -n "${PG_SERVER:-}" ]]; then
        server="$PG_SERVER"
    elif [[ "${DATABASE_URL:-}" == postgres* ]]; then
        server="${DATABASE_URL%%\?*}"
        server="${server%/*}"
    else
        server="postgres://postgres@127.0.0.1:5432"
    fi
    if [[ "$(sql postgres "SHOW autovacuum")" != on ]]; then
        echo "soak.sh: warning: autovacuum is off on $server; the dead-tuple bounds will fail (PG_SERVER=private has it on)" >&2
    fi
    max_wal_bytes="$(sql postgres "SELECT setting::bigint * 1024 * 1024 FROM pg_settings WHERE name = 'max_wal_size'")"
fi

port="$(free_port)"
url="http://127.0.0.1:$port"
db=""

# `fresh_store NAME`: an empty database for the next hookbox (SQLite: the file is
# removed; PostgreSQL: database NAME created).
fresh_store() {
    if [[ "$backend" == sqlite ]]; then
        rm -f "$workdir"/events.db "$workdir"/events.db-*
    else
        db="$1"
        sql postgres "CREATE DATABASE $db" >/dev/null
        databases+=("$db")
    fi
}

start_hookbox() {
    local store=(DB_PATH="$workdir/events.db")
    [[ "$backend" == postgres ]] && store=(DATABASE_URL="$server/$db")
    env -u DATABASE_URL "${store[@]}" \
        BIND_ADDR="127.0.0.1:$port" \
        HANDLERS_DIR="$workdir/handlers" \
        SOURCES_DIR="$workdir/sources" \
        ALLOWED_TARGETS=127.0.0.0/8 \
        RETENTION_DAYS="$retention_days" \
        CLEANUP_INTERVAL_HOURS="$cleanup_hours" \
        LOG_LEVEL="${LOG_LEVEL:-warn}" \
        "$workdir/hookbox" serve >>"$log" 2>&1 &
    hookbox_pid=$!
    wait_ready
}

# `accepted_rate OUTPUT`: 2xx answers per second from `loadgen ingest`'s table.
accepted_rate() {
    awk 'NR == 1 { d = index($0, "duration"); r = index($0, "requests"); n = index($0, "non-2xx") }
        NR == 2 { split(substr($0, d), a, " "); split(substr($0, r), b, " "); split(substr($0, n), c, " ");
                  secs = a[1] + 0; bad = (c[1] == "none" ? 0 : c[1]);
                  if (secs > 0) printf "%.0f", (b[1] - bad) / secs; else print 0 }' <<<"$1"
}

if [[ -n "${RATE:-}" ]]; then
    rate="$RATE"
    echo "soak.sh: RATE=$rate given: no peak search" >&2
    peak_note="RATE=$rate given"
else
    fresh_store "${db_base}_peak"
    start_hookbox
    echo "soak.sh: peak, intake alone (${peak_duration}s, $connections connections)" >&2
    alone_out="$("$workdir/loadgen" ingest --url "$url" --duration "${peak_duration}s" \
        --connections "$connections" 2>/dev/null)"
    echo "$alone_out" >"$out/peak-alone.txt"
    alone="$(accepted_rate "$alone_out")"
    echo "soak.sh: peak, intake while delivering (${peak_duration}s)" >&2
    "$workdir/loadgen" soak --url "$url" --rate 1 --duration "$((peak_duration + 5))s" \
        --interval "$((peak_duration + 5))s" --fail-percent "$fail_percent" \
        --subscriber bench-soak-peak --drain-timeout 0s >"$out/peak-helper.txt" 2>&1 &
    helper_pid=$!
    for _ in $(seq 1 100); do
        curl -fsS -o /dev/null "$url/subscribers/bench-soak-peak" 2>/dev/null && break
        kill -0 "$helper_pid" 2>/dev/null || { cat "$out/peak-helper.txt" >&2; exit 1; }
        sleep 0.1
    done
    delivering_out="$("$workdir/loadgen" ingest --url "$url" --duration "${peak_duration}s" \
        --connections "$connections" --event-type bench.soak 2>/dev/null)"
    echo "$delivering_out" >"$out/peak-delivering.txt"
    delivering="$(accepted_rate "$delivering_out")"
    wait "$helper_pid" || true
    helper_pid=""
    stop "$hookbox_pid"
    hookbox_pid=""
    lower=$((alone < delivering ? alone : delivering))
    rate=$((lower / 2 > 1 ? lower / 2 : 1))
    peak_note="peak $alone/s alone, $delivering/s while delivering"
    echo "soak.sh: $peak_note; soaking at $rate/s" >&2
fi

fresh_store "$db_base"
start_hookbox
echo "soak.sh: $backend soak: $rate events/s for ${duration}s, a sample every ${sample}s; output in $out" >&2

"$workdir/loadgen" soak --url "$url" --rate "$rate" --duration "${duration}s" \
    --interval "${sample}s" --connections "$connections" --fail-percent "$fail_percent" \
    --drain-timeout 5m >"$out/loadgen.txt" 2>"$out/loadgen.err" &
loadgen_pid=$!
started_ns="$(date +%s%N)"

printf 't\trss_kb\tcpu_ticks\tpending\tdb_bytes\twal_bytes\twal_written\tpg_wal_bytes\n' >"$out/samples.tsv"
printf 't\ttable\tlive\tdead\tautovacuums\ttable_bytes\tindex_bytes\n' >"$out/tables.tsv"
[[ "$backend" == postgres ]] && lsn="$(sql "$db" "SELECT pg_current_wal_lsn()")"

# One sample: a line of samples.tsv (and, on PostgreSQL, one line per table).
take_sample() {
    local t="$1" rss cpu pending db_bytes=0 wal_bytes=0 wal_written=0 pg_wal=0
    rss="$(awk '$1 == "VmRSS:" { print $2 }' "/proc/$hookbox_pid/status")"
    cpu="$(awk '{ print $14 + $15 }' "/proc/$hookbox_pid/stat")"
    pending="$(curl -fsS --max-time 5 "$url/metrics" | awk '$1 == "hookbox_events_pending" { print $2 }')"
    if [[ "$backend" == sqlite ]]; then
        db_bytes="$(stat -c %s "$workdir/events.db" 2>/dev/null || echo 0)"
        wal_bytes="$(stat -c %s "$workdir/events.db-wal" 2>/dev/null || echo 0)"
    else
        local now
        IFS=$'\t' read -r now wal_written db_bytes pg_wal < <(sql "$db" "SELECT pg_current_wal_lsn(),
            pg_wal_lsn_diff(pg_current_wal_lsn(), '$lsn'), pg_database_size(current_database()),
            (SELECT coalesce(sum(size), 0) FROM pg_ls_waldir())")
        lsn="$now"
        sql "$db" "SELECT $t, relname, n_live_tup, n_dead_tup, autovacuum_count,
            pg_table_size(relid), pg_indexes_size(relid) FROM pg_stat_user_tables
            WHERE relname IN ('events', 'deliveries', 'attempts') ORDER BY relname" >>"$out/tables.tsv"
    fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$t" "${rss:-0}" "${cpu:-0}" "${pending:-0}" \
        "$db_bytes" "$wal_bytes" "$wal_written" "$pg_wal" >>"$out/samples.tsv"
}

for k in $(seq 1 "$samples"); do
    wait_ns=$((started_ns + k * sample * 1000000000 - $(date +%s%N)))
    ((wait_ns > 0)) && sleep "$(awk -v n="$wait_ns" 'BEGIN { printf "%.3f", n / 1e9 }')"
    if ! kill -0 "$hookbox_pid" 2>/dev/null; then
        echo "soak.sh: hookbox exited during the soak" >&2
        break
    fi
    if ! take_sample $((k * sample)); then
        echo "soak.sh: sample $k failed" >&2
    fi
    kill -0 "$loadgen_pid" 2>/dev/null || break
done
loadgen_status=0
wait "$loadgen_pid" || loadgen_status=$?
loadgen_pid=""

echo "--- loadgen soak ($peak_note; $rate/s, ${duration}s, $connections connections, $fail_percent % refused)"
cat "$out/loadgen.txt"
echo "--- samples (every ${sample}s; raw data in $out)"
python3 - "$out" "$backend" "$duration" "$sample" "$rate" "$loadgen_status" \
    "${max_wal_bytes:-0}" "$retention_days" "$cleanup_hours" <<'PY'
import csv, os, statistics, sys

out, backend = sys.argv[1], sys.argv[2]
duration, sample, rate, loadgen_status = (int(x) for x in sys.argv[3:7])
max_wal = int(sys.argv[7])
retention_s = float(sys.argv[8]) * 86400
cleanup_s = float(sys.argv[9]) * 3600
tick = os.sysconf("SC_CLK_TCK")
MB = 1024 * 1024

def read_tsv(name):
    with open(os.path.join(out, name)) as f:
        return list(csv.DictReader(f, delimiter="\t"))

samples = read_tsv("samples.tsv")
tables = read_tsv("tables.tsv")

def micros(text):
    """loadgen's latency format (850us, 1.85ms, 1.20s) in microseconds."""
    for unit, scale in (("us", 1), ("ms", 1000), ("s", 1_000_000)):
        if text.endswith(unit):
            return float(text[: -len(unit)]) * scale
    return None

rows, columns, unsent = [], None, 0
with open(os.path.join(out, "loadgen.txt")) as f:
    for line in f:
        cells = line.split()
        if cells[:1] == ["elapsed"]:
            columns = cells
        elif columns and len(cells) == len(columns) and cells[0].endswith("s"):
            rows.append(dict(zip(columns, cells)))
        elif columns:
            columns = None
        if line.startswith("requests due but never sent"):
            unsent = int(line.rsplit(":", 1)[1])
rows = rows[: len(samples)]

# Each sample t joined with loadgen's row of the interval ending at t.
points = []
prev_cpu = None
for i, s in enumerate(samples):
    p = {k: float(v) for k, v in s.items()}
    row = rows[i] if i < len(rows) else {}
    p["p50"] = micros(row.get("p50", "-"))
    p["p99"] = micros(row.get("p99", "-"))
    p["late"] = row.get("late_ms", "-")
    p["sent"] = int(row.get("sent", 0))
    p["ok"] = int(row.get("2xx", 0))
    p["bad"] = int(row.get("non-2xx", 0)) + int(row.get("errors", 0))
    p["cpu"] = None if prev_cpu is None else 100 * (p["cpu_ticks"] - prev_cpu) / tick / sample
    prev_cpu = p["cpu_ticks"]
    t = int(p["t"])
    rel = {r["table"]: r for r in tables if int(r["t"]) == t}
    p["tables"] = rel
    points.append(p)

def fmt_ms(us):
    return "-" if us is None else f"{us / 1000:.1f}"

def mb(b):
    return f"{b / MB:.1f}"

head = ["t", "RSS MB", "CPU %", "p50 ms", "p99 ms", "late ms", "2xx/s", "backlog"]
if backend == "sqlite":
    head += ["DB MB", "WAL MB"]
else:
    head += ["DB MB", "dead ev/del/att", "tables MB", "indexes MB", "autovacuums", "WAL written MB",
             "pg_wal MB"]
print("| " + " | ".join(head) + " |")
print("|" + "---|" * len(head))
for p in points:
    t = int(p["t"])
    cells = [f"{t // 60}:{t % 60:02d}", mb(p["rss_kb"] * 1024),
             "-" if p["cpu"] is None else f"{p['cpu']:.0f}",
             fmt_ms(p["p50"]), fmt_ms(p["p99"]), p["late"], f"{p['ok'] / sample:.0f}",
             f"{p['pending']:.0f}"]
    if backend == "sqlite":
        cells += [mb(p["db_bytes"]), mb(p["wal_bytes"])]
    else:
        rel = p["tables"]
        dead = "/".join(rel[n]["dead"] if n in rel else "-" for n in ("events", "deliveries", "attempts"))
        table = sum(int(r["table_bytes"]) for r in rel.values())
        index = sum(int(r["index_bytes"]) for r in rel.values())
        autovac = sum(int(r["autovacuums"]) for r in rel.values())
        cells += [mb(p["db_bytes"]), dead, mb(table), mb(index), str(autovac),
                  mb(p["wal_written"]), mb(p["pg_wal_bytes"])]
    print("| " + " | ".join(cells) + " |")

# The run in quarters: the first is warm-up, the second the reference, the last
# is compared with it.
q2 = [p for p in points if duration / 4 < p["t"] <= duration / 2]
q4 = [p for p in points if p["t"] > 3 * duration / 4]
after = [p for p in points if p["t"] > duration / 4]
failed = False
print()
print(f"--- verdicts (warm-up: the first quarter; reference: the second, {len(q2)} samples; "
      f"final: the last, {len(q4)} samples)")

def verdict(ok, text):
    global failed
    word = {True: "PASS", False: "FAIL", None: "SKIP"}[ok]
    failed |= ok is False
    print(f"{word}  {text}")

def top(points, key):
    values = [key(p) for p in points if key(p) is not None]
    return max(values) if values else None

def mid(points, key):
    values = [key(p) for p in points if key(p) is not None]
    return statistics.median(values) if values else None

def bounded(name, final, ref, factor, unit, slack=0.0, fmt=lambda v: f"{v:.1f}"):
    if final is None or ref is None:
        verdict(None, f"{name}: no samples")
        return
    limit = factor * ref + slack
    extra = f" + {fmt(slack)}" if slack else ""
    verdict(final <= limit,
            f"{name}: {fmt(final)} {unit} in the last quarter <= {factor} x {fmt(ref)}{extra} {unit} "
            f"(the second quarter's)")

complete = len(points) >= 4 and points[-1]["t"] >= duration - sample
if not complete:
    verdict(False, f"the run was sampled to {points[-1]['t'] if points else 0:.0f} s of {duration} s "
            "(hookbox or loadgen stopped early)")
bounded("RSS, max", top(q4, lambda p: p["rss_kb"] / 1024), top(q2, lambda p: p["rss_kb"] / 1024),
        1.25, "MB")
bounded("p99, median of the intervals'", mid(q4, lambda p: p["p99"] and p["p99"] / 1000),
        mid(q2, lambda p: p["p99"] and p["p99"] / 1000), 2, "ms", fmt=lambda v: f"{v:.2f}")
due = rate * duration
sent = sum(p["sent"] for p in points)
verdict(unsent <= due / 1000,
        f"rate held: {unsent} of {due} requests due were never sent (at most 0.1 %)")
bad = sum(p["bad"] for p in points)
verdict(bad <= sent / 1000, f"intake: {bad} of {sent} requests not answered 2xx (at most 0.1 %)")
backlog = top(after, lambda p: p["pending"])
verdict(None if backlog is None else backlog <= 10 * rate,
        f"backlog after warm-up: at most {backlog or 0:.0f} pending <= {10 * rate} (10 s of intake)")
verdict(loadgen_status == 0,
        "backlog drained within 5 minutes of the run's end" if loadgen_status == 0
        else f"loadgen exited {loadgen_status} (backlog not drained, or no answers)")

cycle = retention_s + cleanup_s
if duration / 4 < cycle:
    verdict(None, f"storage bounds: the warm-up ({duration / 4:.0f} s) is shorter than retention + "
            f"cleanup interval ({cycle:.0f} s): the database is still filling; run at least "
            f"{4 * cycle / 60:.0f} minutes")
elif backend == "sqlite":
    bounded("SQLite database file, max", top(q4, lambda p: p["db_bytes"] / MB),
            top(q2, lambda p: p["db_bytes"] / MB), 1.25, "MB")
else:
    bounded("PostgreSQL database size, max", top(q4, lambda p: p["db_bytes"] / MB),
            top(q2, lambda p: p["db_bytes"] / MB), 1.25, "MB")
    for name in ("events", "deliveries", "attempts"):
        def dead(p, name=name):
            r = p["tables"].get(name)
            return None if r is None else int(r["dead"])
        def index(p, name=name):
            r = p["tables"].get(name)
            return None if r is None else int(r["index_bytes"]) / MB
        bounded(f"{name}: dead tuples, max", top(q4, dead), top(q2, dead), 1.5, "rows",
                slack=1000, fmt=lambda v: f"{v:.0f}")
        bounded(f"{name}: index size, max", top(q4, index), top(q2, index), 1.25, "MB")
    def autovacuums(p):
        return sum(int(r["autovacuums"]) for r in p["tables"].values())
    first, last = top(q2[:1], autovacuums), top(points[-1:], autovacuums)
    verdict(None if first is None or last is None else last > first,
            f"autovacuum ran after warm-up: {first} runs on the three tables at the reference's "
            f"start, {last} at the end")

if backend == "sqlite":
    wal = top(points, lambda p: p["wal_bytes"] / MB)
    verdict(None if wal is None else wal <= 160,
            f"SQLite WAL file: at most {wal or 0:.1f} MB <= 160 MB (4 x the 40 MB checkpoint threshold)")
else:
    def per_event(p):
        return p["wal_written"] / p["ok"] if p["ok"] else None
    bounded("WAL written per accepted event, median", mid(q4, per_event), mid(q2, per_event), 1.5,
            "bytes", fmt=lambda v: f"{v:.0f}")
    pg_wal = top(points, lambda p: p["pg_wal_bytes"] / MB)
    verdict(None if pg_wal is None else pg_wal <= 2 * max_wal / MB,
            f"pg_wal: at most {pg_wal or 0:.0f} MB <= 2 x max_wal_size ({max_wal / MB:.0f} MB)")

sys.exit(1 if failed else 0)
PY
