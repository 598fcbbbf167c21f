-- wrk script for bench/proxy/run.sh's THINK_MS: each connection waits
-- THINK_MS milliseconds after a response before its next request, so
-- the offered load is about CONNS / (THINK_MS + latency) requests a
-- second, below saturation, and alike for every proxy. Latency then
-- compares proxies at the same load instead of at each one's maximum.
local ms = tonumber(os.getenv("THINK_MS") or "0")
delay = function() return ms end
