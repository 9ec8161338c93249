-- wrk script for intake: POST /webhooks with a 1 KB JSON event and a unique
-- Idempotency-Key per request (`wrk-<start time>-<thread>-<counter>`), the body
-- loadgen's `ingest` sends (`{"event_type": "bench.ingest", "payload": {…}}`,
-- a payload of 1,024 bytes). Used by `scripts/bench.sh floor` when wrk is
-- installed:
--
--   wrk -t2 -c64 -d10s --latency -s scripts/wrk-intake.lua http://127.0.0.1:8000

local threads = 0
local started = os.time()

-- Runs in the main Lua state once per thread: gives each thread its number.
function setup(thread)
    threads = threads + 1
    thread:set("thread_id", threads)
    thread:set("run", started)
end

-- Runs in each thread's own Lua state.
function init(args)
    counter = 0
    prefix = string.format("wrk-%d-%d-", run, thread_id)
    local head = '{"source":"hookbox-wrk","run_id":"' .. run .. '","padding":"'
    local tail = '"}'
    local payload = head .. string.rep("x", 1024 - #head - #tail) .. tail
    body = '{"event_type":"bench.ingest","payload":' .. payload .. '}'
end

function request()
    counter = counter + 1
    local headers = {
        ["Content-Type"] = "application/json",
        ["Idempotency-Key"] = prefix .. counter,
    }
    return wrk.format("POST", "/webhooks", headers, body)
end
