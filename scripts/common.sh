# shellcheck shell=bash
# Shell functions the benchmark scripts share (bench.sh, bench-pg.sh, soak.sh,
# bench-subscribers.sh); sourced, not run.

# `free_port`: a free TCP port on 127.0.0.1.
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# `wait_ready [PID URL NAME]` (default: hookbox's, from $hookbox_pid and $url)
# waits, polling every 10 ms, up to 60 s, until GET URL/ready answers 200; exits
# the script if the process ends first or the time runs out.
wait_ready() {
    local pid="${1:-$hookbox_pid}" base="${2:-$url}" name="${3:-hookbox}"
    local me
    me="$(basename "$0")"
    for _ in $(seq 1 6000); do
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "$me: $name exited during startup" >&2
            exit 1
        fi
        if curl -fsS -o /dev/null --max-time 1 "$base/ready" 2>/dev/null; then
            return 0
        fi
        sleep 0.01
    done
    echo "$me: $name did not become ready at $base/ready within 60s" >&2
    exit 1
}
