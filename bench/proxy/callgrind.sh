#!/usr/bin/env bash
# User-space instructions per request, counted by valgrind's callgrind:
# exact and independent of the machine's load (time-based sampling is too
# noisy on a shared VM, and hardware counters are not available there).
#
#   bench/proxy/callgrind.sh                      # fulcrum and nginx, N=20000
#   ONLY=fulcrum bench/proxy/callgrind.sh         # fulcrum only
#   FULCRUM=/tmp/fulcrum-old ONLY=fulcrum bench/proxy/callgrind.sh
#                                                 # another fulcrum binary
#   KEEP=/tmp/cg bench/proxy/callgrind.sh         # keep the callgrind.out files
#                                                 # (callgrind_annotate --inclusive=yes KEEP/fulcrum.out)
#
# Each proxy runs under `valgrind --tool=callgrind --separate-threads=no`
# in front of the three demo upstreams (`fulcrum demo upstreams`, run
# natively) with the same config as run.sh's (fulcrum: round robin,
# access log off; nginx: keepalive 128, proxy_http_version 1.1, one
# process: master_process off, worker_processes 1). h2load --h1 sends
# WARM=2000 keep-alive requests over CONNS=64 connections (connections
# opened, pools filled, the Go heap grown), then the counters are zeroed
# (callgrind_control --zero), exactly N=20000 requests run over CONNS
# fresh connections, and the counters are dumped (callgrind_control
# --dump). The figure is the dump's total Ir (instructions executed in
# user space, every thread, the Go runtime included) over N. The
# connection setup of the measured phase (64 accepts and closes) is in
# the figure; a larger N dilutes it.
#
# An instruction count is not CPU time: cheap instructions (byte loops on
# a head in L1) weigh as much as ones that miss the cache, and valgrind
# runs one thread at a time, so Go's scheduler (spinning, wake-ups) is
# under-counted. On 2026-11-28 a quarter fewer instructions per request
# showed as about 5 % less user time in run.sh (docs/notes/benchmarks-log.md).
#
# Fulcrum runs with GODEBUG=asyncpreemptoff=1 (valgrind and Go's
# preemption signals do not mix well) and GOMAXPROCS=${GOMAXPROCS:-2} as
# on the 2-core benchmark box. Repeat runs agree within about 1 %.
# Ports: 18380-18381, 19301-19303, admin 19900 (PORT_OFFSET moves them).
set -euo pipefail

N=${N:-20000}
WARM=${WARM:-2000}
CONNS=${CONNS:-64}
ONLY=${ONLY:-"fulcrum nginx"}
KEEP=${KEEP:-}
PORT_OFFSET=${PORT_OFFSET:-0}
export GOMAXPROCS=${GOMAXPROCS:-2}
export PATH=$PATH:/usr/sbin

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
work=$(mktemp -d /tmp/fulcrum-callgrind.XXXXXX)
pids=()
cleanup() {
	for p in "${pids[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

for t in valgrind callgrind_control h2load; do
	command -v $t >/dev/null || { echo "needs $t (apt-get install valgrind nghttp2-client)" >&2; exit 1; }
done

if [ -z "${FULCRUM:-}" ]; then
	echo "building fulcrum" >&2
	(cd "$root" && go build -o "$work/fulcrum" ./cmd/fulcrum)
	FULCRUM=$work/fulcrum
fi

FP=$((18380 + PORT_OFFSET)) NP=$((18381 + PORT_OFFSET))
U1=127.0.0.1:$((19301 + PORT_OFFSET)) U2=127.0.0.1:$((19302 + PORT_OFFSET)) U3=127.0.0.1:$((19303 + PORT_OFFSET))
"$FULCRUM" demo upstreams --listen $U1,$U2,$U3 >"$work/upstreams.log" 2>&1 &
pids+=($!)

cat >"$work/fulcrum.yaml" <<YAML
listen: 127.0.0.1:$FP
admin: {listen: 127.0.0.1:$((19900 + PORT_OFFSET))}
access_log: {enabled: false}
upstreams:
  demo:
    strategy: round_robin
    targets:
      - {url: "http://$U1"}
      - {url: "http://$U2"}
      - {url: "http://$U3"}
YAML

cat >"$work/nginx.conf" <<NGINX
master_process off;
daemon off;
worker_processes 1;
pid $work/nginx.pid;
error_log $work/nginx-error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  map \$http_x_request_id \$rid { default \$http_x_request_id; "" \$request_id; }
  upstream demo { server $U1; server $U2; server $U3; keepalive 128; }
  server {
    listen 127.0.0.1:$NP;
    location / {
      proxy_pass http://demo;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host \$http_host;
      proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
      proxy_set_header X-Forwarded-Proto \$scheme;
      proxy_set_header X-Forwarded-Host \$http_host;
      proxy_set_header X-Request-Id \$rid;
      add_header X-Request-Id \$rid;
    }
  }
}
NGINX

# measure NAME PORT VAR=VALUE CMD...: prints NAME's Ir per request. The
# environment goes to valgrind itself: `valgrind env ...` would count env,
# not the program it execs.
measure() {
	local name=$1 port=$2 envs=$3
	shift 3
	local out=$work/$name.out
	env $envs valgrind --tool=callgrind --separate-threads=no --dump-instr=no \
		--callgrind-out-file="$out" "$@" >"$work/$name.log" 2>&1 &
	local vpid=$!
	pids+=($vpid)
	local up=
	for _ in $(seq 600); do
		if curl -fs "http://127.0.0.1:$port/" >/dev/null 2>&1; then up=1; break; fi
		sleep 0.1
	done
	[ -n "$up" ] || { echo "$name did not come up; log:" >&2; cat "$work/$name.log" >&2; return 1; }
	h2load --h1 -n "$WARM" -c "$CONNS" -t 1 "http://127.0.0.1:$port/" >"$work/$name.warm" 2>&1
	callgrind_control --zero "$vpid" >/dev/null 2>&1
	h2load --h1 -n "$N" -c "$CONNS" -t 1 "http://127.0.0.1:$port/" >"$work/$name.h2load" 2>&1
	grep -q "requests: $N total, $N started, $N done, $N succeeded" "$work/$name.h2load" ||
		{ echo "$name: h2load did not finish every request:" >&2; cat "$work/$name.h2load" >&2; return 1; }
	callgrind_control --dump "$vpid" >/dev/null 2>&1
	# The dump is written as OUT.1 (the first dump of a run).
	local f
	for _ in $(seq 100); do
		f=$(ls "$out".* 2>/dev/null | head -1 || true)
		[ -n "$f" ] && grep -q '^totals:' "$f" 2>/dev/null && break
		sleep 0.2
	done
	kill "$vpid" 2>/dev/null || true
	wait "$vpid" 2>/dev/null || true
	local ir
	ir=$(awk '/^totals:/ {print $2}' "$f")
	[ -n "$KEEP" ] && { mkdir -p "$KEEP"; cp "$f" "$KEEP/$name.out"; }
	printf "%-8s %12d Ir  %8.0f Ir/request  (N=%d, load %s, %s UTC)\n" "$name" "$ir" "$(echo "$ir / $N" | bc -l)" "$N" \
		"$(cut -d' ' -f1-3 /proc/loadavg)" "$(date -u +%H:%M:%S)"
}

for p in $ONLY; do
	case $p in
	fulcrum) measure fulcrum "$FP" GODEBUG=asyncpreemptoff=1 "$FULCRUM" gateway --config "$work/fulcrum.yaml" ;;
	nginx) measure nginx "$NP" NGINX=1 nginx -c "$work/nginx.conf" -p "$work" ;;
	*) echo "unknown proxy $p (want fulcrum, nginx)" >&2; exit 1 ;;
	esac
done
