#!/usr/bin/env bash
# HTTP/2-over-TLS benchmark: Fulcrum (this tree, and optionally another
# binary as "before") against nginx, in front of the same three demo
# upstreams, driven by h2load. Interleaved rounds, medians reported.
#
#   bench/proxy/h2.sh
#   FULCRUM_BEFORE=/tmp/fulcrum-h2-before ROUNDS=5 bench/proxy/h2.sh
#   PROFILE=after bench/proxy/h2.sh    # also a 5 s CPU profile of that row,
#                                      # left in /tmp/h2-<row>.pprof
#   LOAD=wrk bench/proxy/h2.sh         # HTTP/1.1 over TLS instead:
#                                      # wrk -t2 -c64 -d5s (WRK_ARGS)
#
# Ports 27001-27003 (upstreams), 27443 (fulcrum), 27444 (nginx) and
# 27901 (admin) keep it clear of run.sh, which may run beside it.
#
# Columns: req/s (h2load's), CPU µs per request (the proxy's utime+stime
# from /proc/PID/stat, its workers' too, over the h2load run, divided by
# the requests h2load completed), and h2load's mean and max request time.
# Both proxies use one certificate (ECDSA P-256) and h2load offers one
# TLS 1.3 suite (TLS_AES_128_GCM_SHA256), so both negotiate the same.
set -euo pipefail

ROUNDS=${ROUNDS:-3}
ARGS=${ARGS:-"-c16 -m16 -t2 -D5"}
LOAD=${LOAD:-h2load}
WRK_ARGS=${WRK_ARGS:-"-t2 -c64 -d5s"}
FULCRUM_BEFORE=${FULCRUM_BEFORE:-}
PROFILE=${PROFILE:-}
export PATH=$PATH:/usr/sbin:/usr/local/go/bin

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
work=$(mktemp -d /tmp/fulcrum-h2-bench.XXXXXX)
pids=()
cur=
cleanup() {
	[ -n "$cur" ] && kill "$cur" 2>/dev/null || true
	for p in "${pids[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

(cd "$root" && CGO_ENABLED=0 go build -o "$work/fulcrum" ./cmd/fulcrum)
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
	-subj /CN=127.0.0.1 -keyout "$work/key.pem" -out "$work/cert.pem" >/dev/null 2>&1

U1=127.0.0.1:27001 U2=127.0.0.1:27002 U3=127.0.0.1:27003
"$work/fulcrum" demo upstreams --listen $U1,$U2,$U3 >"$work/upstreams.log" 2>&1 &
pids+=($!)

cat >"$work/fulcrum.yaml" <<YAML
listen: 127.0.0.1:27443
admin: {listen: 127.0.0.1:27901}
access_log: {enabled: false}
tls: {cert_file: $work/cert.pem, key_file: $work/key.pem}
upstreams:
  demo:
    strategy: round_robin
    targets:
      - {url: "http://$U1"}
      - {url: "http://$U2"}
      - {url: "http://$U3"}
YAML

cat >"$work/nginx.conf" <<NGINX
worker_processes 2;
pid $work/nginx.pid;
error_log $work/nginx-error.log warn;
daemon off;
events { worker_connections 4096; }
http {
  access_log off;
  upstream demo { server $U1; server $U2; server $U3; keepalive 128; }
  server {
    listen 127.0.0.1:27444 ssl http2;
    ssl_certificate $work/cert.pem;
    ssl_certificate_key $work/key.pem;
    ssl_protocols TLSv1.2 TLSv1.3;
    keepalive_requests 10000000;
    http2_max_requests 10000000;
    location / {
      proxy_pass http://demo;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host \$host;
      proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
    }
  }
}
NGINX

rows="after nginx"
[ -n "$FULCRUM_BEFORE" ] && rows="before $rows"

port_of() { case $1 in nginx) echo 27444 ;; *) echo 27443 ;; esac; }

start() {
	case $1 in
	after) "$work/fulcrum" gateway --config "$work/fulcrum.yaml" >"$work/$1.log" 2>&1 & ;;
	before) "$FULCRUM_BEFORE" gateway --config "$work/fulcrum.yaml" >"$work/$1.log" 2>&1 & ;;
	nginx) nginx -c "$work/nginx.conf" -p "$work" >"$work/$1.log" 2>&1 & ;;
	esac
	cur=$!
	for _ in $(seq 100); do
		curl -fsk "https://127.0.0.1:$(port_of "$1")/" >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	echo "$1 did not come up" >&2
	cat "$work/$1.log" >&2
	return 1
}

stop() { kill "$cur" 2>/dev/null || true; wait "$cur" 2>/dev/null || true; cur=; sleep 0.5; }

ticks() {
	local sum=0 pid
	for pid in "$cur" $(pgrep -P "$cur" 2>/dev/null); do
		[ -r "/proc/$pid/stat" ] && sum=$((sum + $(awk '{print $14 + $15}' "/proc/$pid/stat")))
	done
	echo "$sum"
}

hz=$(getconf CLK_TCK)
: >"$work/results"
for round in $(seq "$ROUNDS"); do
	for row in $rows; do
		start "$row"
		url="https://127.0.0.1:$(port_of "$row")/"
		if [ "$LOAD" = wrk ]; then
			wrk -t2 -c64 -d1s "$url" >/dev/null 2>&1 # warm-up
		else
			h2load -c16 -m16 -t2 -n5000 --tls13-ciphers=TLS_AES_128_GCM_SHA256 "$url" >/dev/null 2>&1 # warm-up
		fi
		if [ "$PROFILE" = "$row" ]; then
			curl -s -o "/tmp/h2-$row.pprof" "http://127.0.0.1:27901/debug/pprof/profile?seconds=5" &
			prof=$!
		fi
		t0=$(ticks)
		if [ "$LOAD" = wrk ]; then
			# shellcheck disable=SC2086
			out=$(wrk $WRK_ARGS "$url" 2>&1)
		else
			# shellcheck disable=SC2086
			out=$(h2load $ARGS --tls13-ciphers=TLS_AES_128_GCM_SHA256 "$url" 2>&1)
		fi
		t1=$(ticks)
		[ "$PROFILE" = "$row" ] && wait "$prof"
		stop
		if [ "$LOAD" = wrk ]; then
			rps=$(echo "$out" | awk '/^Requests\/sec:/ {print $2}')
			done_=$(echo "$out" | awk '/requests in/ {print $1}')
			ok=$done_
			mean=$(echo "$out" | awk '/Latency/ {print $2; exit}')
			maxt=$(echo "$out" | awk '/Latency/ {print $4; exit}')
			cipher=-
		else
			rps=$(echo "$out" | awk '/^finished in/ {print $4}')
			done_=$(echo "$out" | awk '/^requests:/ {print $8}')
			ok=$(echo "$out" | awk '/^status codes:/ {print $3}')
			mean=$(echo "$out" | awk '/^time for request:/ {print $6}')
			maxt=$(echo "$out" | awk '/^time for request:/ {print $5}')
			cipher=$(echo "$out" | awk -F': ' '/^Cipher:/ {print $2}')
		fi
		cpu=$(awk -v t=$((t1 - t0)) -v hz="$hz" -v n="$done_" 'BEGIN { printf "%.1f", n ? t / hz * 1e6 / n : 0 }')
		echo "$round $row $rps $cpu $mean $maxt $ok/$done_ $cipher" | tee -a "$work/results" >&2
	done
done

echo
echo "| proxy | req/s | CPU µs/req | mean | max |"
echo "|---|---:|---:|---:|---:|"
for row in $rows; do
	rps=$(awk -v r="$row" '$2 == r {print $3}' "$work/results" | sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}')
	cpu=$(awk -v r="$row" '$2 == r {print $4}' "$work/results" | sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}')
	mean=$(awk -v r="$row" '$2 == r {print $5}' "$work/results" | sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}')
	maxt=$(awk -v r="$row" '$2 == r {print $6}' "$work/results" | sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}')
	echo "| $row | $rps | $cpu | $mean | $maxt |"
done
