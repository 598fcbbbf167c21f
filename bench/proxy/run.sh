#!/usr/bin/env bash
# Proxy benchmark: Fulcrum against nginx, HAProxy, Caddy and a plain
# httputil.ReverseProxy, each in front of the same three tiny Go upstreams
# (`fulcrum demo upstreams`) with equivalent round-robin keep-alive
# configs, driven by the same wrk load. Prints one table.
#
#   bench/proxy/run.sh                 # ROUNDS=3 DURATION=8s CONNS=64 THREADS=2 (pinned: 256, 4)
#   ROUNDS=5 bench/proxy/run.sh
#   FULCRUM_BEFORE=/tmp/fulcrum-old ONLY="fulcrum before" bench/proxy/run.sh
#                                      # a before/after row: another fulcrum
#                                      # binary, same config, same rounds
#   ONLY="fulcrum goroutines nginx haproxy" BASE=nginx COUNTS=1 bench/proxy/run.sh
#                                      # the gateway on its event loop and on its
#                                      # goroutine path, with syscalls and context
#                                      # switches per request
#   THINK_MS=2 ONLY="fulcrum nginx" bench/proxy/run.sh
#                                      # every connection waits 2 ms between
#                                      # requests: the same offered load for
#                                      # each proxy (about 22k req/s on 2 vCPUs),
#                                      # so the latencies compare at one load
#   PROTO=tls bench/proxy/run.sh       # HTTP/1.1 over TLS (wrk https, keep-alive)
#   PROTO=h2 bench/proxy/run.sh        # HTTP/2 over TLS (h2load -cCONNS -mSTREAMS -tTHREADS)
#   PROTO=h2 ONLY="fulcrum nginx gobare nginxbare h2own" BASE=nginx COUNTS=1 bench/proxy/run.sh
#                                      # with the floors: net/http's server,
#                                      # nginx and a server of our own each
#                                      # answering by themselves
#
# PROTO=tls and PROTO=h2 serve TLS on every proxy's port with one
# self-signed P-256 certificate made in the temp dir, TLS 1.3 and one
# cipher suite, TLS_AES_128_GCM_SHA256 (nginx and HAProxy are restricted
# to it; Go's server picks it first on CPUs with AES instructions, and
# the first round prints what each proxy negotiated). Rows: fulcrum,
# before, nginx, haproxy (ONLY defaults to "fulcrum nginx haproxy").
# nginx's keepalive_requests is raised so it does not close the load's
# connections every 1000 requests (Fulcrum and HAProxy never do). h2
# defaults to h2load -c16 -m16 (CONNS, STREAMS) and reads p50/p99 from
# h2load's per-request log (h2load prints no percentiles).
#
# Rows: direct = wrk straight at one upstream (the ceiling); gobare =
# net/http's server (HTTP/2 over TLS under PROTO=h2) answering every
# request itself, no proxying (bench/proxy/gobare): the floor of what a
# proxy behind that server spends; nginxbare = nginx answering itself
# (`return 200`), nginx's floor; h2own = an HTTP/2 server without a
# goroutine or channel per stream (bench/proxy/h2own, PROTO=h2 only)
# answering itself: the floor of an HTTP/2 server of our own; fulcrum =
# default settings (GOMAXPROCS = CPUs, GOGC 400); fulcrum-1p = GOMAXPROCS=1
# (one event loop, as the proxy's share of a 2-core box shared with wrk and
# the upstreams is about one core); stdproxy = httputil.ReverseProxy;
# goroutines = the same binary with its event loop off
# (FULCRUM_GATEWAY_EVENT_LOOP=off: a goroutine per connection).
#
# COUNTS=1 adds two columns: context switches per request (voluntary +
# nonvoluntary, summed over the proxy's threads and child processes from
# /proc/PID/task/*/status, during the timed run) and syscalls per request
# (perf stat -e raw_syscalls:sys_enter attached to the proxy during a
# further COUNT_DURATION=3s wrk run, so its cost stays out of the timed
# figures; "-" without perf). BASE=nginx makes the unpinned table's ratio
# column compare with nginx's row instead of Fulcrum's.
#
# Rounds are interleaved (every proxy once per round) and the median round
# is reported, so a noisy neighbour hurts every proxy alike.
#
# On 8 or more CPUs the proxy is pinned (taskset) to 2, then 4 cores
# (CORE_SETS="2 4"), with GOMAXPROCS, nginx worker_processes and HAProxy
# nbthread set to match, while wrk and the upstreams run on the cores
# above the largest set; each core set gets its own table with the proxy's
# CPU time per request taken from /proc/stat of its pinned cores and the
# ratio to nginx. PIN=off keeps everything unpinned; PIN=on pins even on a
# small machine (a smoke test: CORE_SETS=1 on 2 CPUs). On fewer than 8
# CPUs nothing is pinned and the CPU column is the proxy processes' own
# utime+stime. Needs root or
# the tools installed (apt-get install wrk nginx-light haproxy caddy).
set -euo pipefail

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-8s}
PROTO=${PROTO:-http} # http, tls (HTTP/1.1 over TLS) or h2 (HTTP/2 over TLS)
case $PROTO in
http) ONLY=${ONLY:-"direct fulcrum fulcrum-1p nginx haproxy caddy stdproxy"} scheme=http ;;
tls | h2) ONLY=${ONLY:-"fulcrum nginx haproxy"} scheme=https ;;
*) echo "PROTO=$PROTO: want http, tls or h2" >&2; exit 1 ;;
esac
if [ "$PROTO" != http ]; then
	for p in $ONLY; do
		case $p in fulcrum | fulcrum-1p | before | goroutines | nginx | haproxy | gobare | nginxbare) ;;
		h2own) [ "$PROTO" = h2 ] || { echo "PROTO=$PROTO: h2own speaks HTTP/2 only" >&2; exit 1; } ;;
		*) echo "PROTO=$PROTO: no TLS config for $p" >&2; exit 1 ;;
		esac
	done
fi
FULCRUM_BEFORE=${FULCRUM_BEFORE:-} # another fulcrum binary for the "before" row
COUNTS=${COUNTS:-}                 # 1: syscalls and context switches per request
COUNT_DURATION=${COUNT_DURATION:-3s}
THINK_MS=${THINK_MS:-} # http, tls: each connection waits this long between requests (equal offered load)
NCPU=$(nproc)
PIN=${PIN:-auto}
if [ "$PIN" = on ] || { [ "$PIN" = auto ] && [ "$NCPU" -ge 8 ]; }; then
	CORE_SETS=${CORE_SETS:-"2 4"}
else
	CORE_SETS=0 # 0: unpinned
fi
# Pinned (a big machine): wrk -t4 -c256 as the many-core measurements
# ran; unpinned: -t2 -c64.
if [ "$CORE_SETS" != 0 ]; then
	THREADS=${THREADS:-4} CONNS=${CONNS:-256}
elif [ "$PROTO" = h2 ]; then
	THREADS=${THREADS:-2} CONNS=${CONNS:-16}
else
	THREADS=${THREADS:-2} CONNS=${CONNS:-64}
fi
STREAMS=${STREAMS:-16} # h2: concurrent streams per connection (h2load -m)
PORT_OFFSET=${PORT_OFFSET:-0} # added to every port (18080-18087, 19001-19003, 19901): two runs side by side
maxset=0
for P in $CORE_SETS; do [ "$P" -gt "$maxset" ] && maxset=$P; done
if [ "$maxset" -gt 0 ]; then
	[ "$maxset" -lt "$NCPU" ] || { echo "CORE_SETS up to $maxset leaves no core for wrk and the upstreams on $NCPU CPUs" >&2; exit 1; }
	load_pin=(taskset -c "$maxset-$((NCPU - 1))") # wrk and the upstreams
else
	load_pin=()
fi

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
work=$(mktemp -d /tmp/fulcrum-proxy-bench.XXXXXX)
pids=()
cleanup() {
	for p in "${pids[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
	# The proxy being measured when the run stopped (one that "did not
	# come up"): wait below would otherwise wait on it forever.
	[ -n "${cur:-}" ] && kill "$cur" 2>/dev/null || true
	[ -f "$work/nginx.pid" ] && kill "$(cat "$work/nginx.pid")" 2>/dev/null || true
	[ -f "$work/nginxbare.pid" ] && kill "$(cat "$work/nginxbare.pid")" 2>/dev/null || true
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

# Install only what the rows asked for (ONLY) need.
wants() { case " $ONLY " in *" $1 "*) return 0 ;; esac; return 1; }
need=()
command -v wrk >/dev/null || need+=(wrk)
[ "$PROTO" = h2 ] && { command -v h2load >/dev/null || need+=(nghttp2-client); }
{ wants nginx || wants nginxbare; } && { command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || need+=(nginx-light); }
wants haproxy && { command -v haproxy >/dev/null || [ -x /usr/sbin/haproxy ] || need+=(haproxy); }
wants caddy && { command -v caddy >/dev/null || need+=(caddy); }
if [ ${#need[@]} -gt 0 ]; then
	echo "installing ${need[*]}" >&2
	apt-get install -y "${need[@]}" >/dev/null 2>&1 || { apt-get update >/dev/null && apt-get install -y "${need[@]}" >/dev/null; }
fi
export PATH=$PATH:/usr/sbin

echo "building fulcrum and stdproxy" >&2
(cd "$root" && go build -o "$work/fulcrum" ./cmd/fulcrum)
(cd "$root/bench" && go build -o "$work/stdproxy" ./proxy/stdproxy && go build -o "$work/gobare" ./proxy/gobare && go build -o "$work/h2own" ./proxy/h2own)

port_of() {
	local p
	case $1 in
	direct) p=19001 ;; fulcrum | fulcrum-1p | before | goroutines) p=18080 ;; nginx) p=18081 ;;
	haproxy) p=18082 ;; caddy) p=18083 ;; stdproxy) p=18084 ;; gobare) p=18085 ;; nginxbare) p=18086 ;; h2own) p=18087 ;;
	esac
	echo $((p + PORT_OFFSET))
}

U1=127.0.0.1:$((19001 + PORT_OFFSET)) U2=127.0.0.1:$((19002 + PORT_OFFSET)) U3=127.0.0.1:$((19003 + PORT_OFFSET))
"${load_pin[@]}" "$work/fulcrum" demo upstreams --listen $U1,$U2,$U3 >"$work/upstreams.log" 2>&1 &
pids+=($!)

if [ "$PROTO" != http ]; then
	# One certificate and key for every proxy (HAProxy wants them in one file).
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
		-subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 \
		-keyout "$work/key.pem" -out "$work/cert.pem" 2>/dev/null
	cat "$work/cert.pem" "$work/key.pem" >"$work/both.pem"
fi

cat >"$work/fulcrum.yaml" <<YAML
listen: 127.0.0.1:$(port_of fulcrum)
admin: {listen: 127.0.0.1:$((19901 + PORT_OFFSET))}
access_log: {enabled: false}
upstreams:
  demo:
    strategy: round_robin
    targets:
      - {url: "http://$U1"}
      - {url: "http://$U2"}
      - {url: "http://$U3"}
YAML
[ "$PROTO" != http ] && echo "tls: {cert_file: $work/cert.pem, key_file: $work/key.pem}" >>"$work/fulcrum.yaml"

case $PROTO in
http) nginx_listen="listen 127.0.0.1:$(port_of nginx);" hap_bind="" ;;
tls | h2)
	nginx_listen="listen 127.0.0.1:$(port_of nginx) ssl$([ "$PROTO" = h2 ] && echo " http2" || true);
    ssl_certificate $work/cert.pem;
    ssl_certificate_key $work/key.pem;
    ssl_protocols TLSv1.3;
    ssl_conf_command Ciphersuites TLS_AES_128_GCM_SHA256;
    keepalive_requests 100000000;"
	hap_bind=" ssl crt $work/both.pem alpn h2,http/1.1 ssl-min-ver TLSv1.3 ciphersuites TLS_AES_128_GCM_SHA256"
	;;
esac

# Every proxy does the same work a request as the gateway does by default
# (docs/gateway.md, "What is forwarded"): X-Forwarded-For, -Proto and -Host to the
# target, and an X-Request-Id, the client's or a new one, to the target
# and back in the response. Without it the peers did less: nginx with
# these headers spent 10-20 % more CPU a request, and the demo upstreams
# more behind the gateway than behind nginx (docs/notes/benchmarks-log.md,
# 2026-11-28 21:27 UTC).
cat >"$work/nginx.conf" <<NGINX
worker_processes WORKERS;
pid $work/nginx.pid;
error_log $work/nginx-error.log warn;
daemon off;
events { worker_connections 4096; }
http {
  access_log off;
  map \$http_x_request_id \$rid { default \$http_x_request_id; "" \$request_id; }
  upstream demo { server $U1; server $U2; server $U3; keepalive 128; }
  server {
    $nginx_listen
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

# nginxbare: the same server answering as a demo upstream does, no proxying.
np=$(port_of nginx) bp=$(port_of nginxbare)
bare_listen=${nginx_listen/$np/$bp}
cat >"$work/nginxbare.conf" <<NGINX
worker_processes WORKERS;
pid $work/nginxbare.pid;
error_log $work/nginxbare-error.log warn;
daemon off;
events { worker_connections 4096; }
http {
  access_log off;
  server {
    $bare_listen
    location / {
      add_header X-Upstream upstream-1;
      default_type "text/plain; charset=utf-8";
      return 200 "upstream-1\n";
    }
  }
}
NGINX

cat >"$work/haproxy.cfg" <<HAP
global
  maxconn 4000
  nbthread WORKERS
defaults
  mode http
  timeout connect 5s
  timeout client 30s
  timeout server 30s
  option http-keep-alive
  option forwardfor
  http-reuse always
frontend fe
  bind 127.0.0.1:$(port_of haproxy)$hap_bind
  unique-id-format %{+X}o\\ %ci:%cp_%fi:%fp_%Ts_%rt:%pid
  http-request set-header X-Request-Id %[unique-id] unless { req.hdr(x-request-id) -m found }
  http-request set-var(txn.rid) req.hdr(x-request-id)
  http-request set-header X-Forwarded-Proto %[ssl_fc,iif(https,http)]
  http-request set-header X-Forwarded-Host %[req.hdr(host)]
  http-response set-header X-Request-Id %[var(txn.rid)]
  default_backend be
backend be
  balance roundrobin
  server s1 $U1
  server s2 $U2
  server s3 $U3
HAP

cat >"$work/Caddyfile" <<CADDY
{
  admin off
  auto_https off
}
http://127.0.0.1:$(port_of caddy) {
  bind 127.0.0.1
  reverse_proxy $U1 $U2 $U3 {
    lb_policy round_robin
  }
}
CADDY


# start runs a proxy; pinned, on the cores 0..P-1 with P threads/workers.
start() {
	local pin=() n=2
	if [ "$P" -gt 0 ]; then
		pin=(taskset -c "0-$((P - 1))")
		n=$P
	fi
	sed "s/WORKERS/$n/" "$work/nginx.conf" >"$work/nginx-run.conf"
	sed "s/WORKERS/$n/" "$work/haproxy.cfg" >"$work/haproxy-run.cfg"
	sed "s/WORKERS/$n/" "$work/nginxbare.conf" >"$work/nginxbare-run.conf"
	local gmp=()
	[ "$P" -gt 0 ] && gmp=(env GOMAXPROCS="$P")
	case $1 in
	direct) return 0 ;;
	fulcrum) "${pin[@]}" "${gmp[@]}" "$work/fulcrum" gateway --config "$work/fulcrum.yaml" >"$work/fulcrum.log" 2>&1 & ;;
	fulcrum-1p) "${pin[@]}" env GOMAXPROCS=1 "$work/fulcrum" gateway --config "$work/fulcrum.yaml" >"$work/fulcrum-1p.log" 2>&1 & ;;
	before) "${pin[@]}" "${gmp[@]}" "$FULCRUM_BEFORE" gateway --config "$work/fulcrum.yaml" >"$work/before.log" 2>&1 & ;;
	nginx) "${pin[@]}" nginx -c "$work/nginx-run.conf" -p "$work" >"$work/nginx.log" 2>&1 & ;;
	haproxy) "${pin[@]}" haproxy -f "$work/haproxy-run.cfg" -db >"$work/haproxy.log" 2>&1 & ;;
	caddy) HOME=$work XDG_DATA_HOME=$work XDG_CONFIG_HOME=$work "${pin[@]}" "${gmp[@]}" caddy run --config "$work/Caddyfile" --adapter caddyfile >"$work/caddy.log" 2>&1 & ;;
	stdproxy) "${pin[@]}" "${gmp[@]}" "$work/stdproxy" -listen "127.0.0.1:$(port_of stdproxy)" -targets $U1,$U2,$U3 >"$work/stdproxy.log" 2>&1 & ;;
	nginxbare) "${pin[@]}" nginx -c "$work/nginxbare-run.conf" -p "$work" >"$work/nginxbare.log" 2>&1 & ;;
	gobare)
		local tls=()
		[ "$PROTO" != http ] && tls=(-cert "$work/cert.pem" -key "$work/key.pem")
		"${pin[@]}" "${gmp[@]}" "$work/gobare" -listen "127.0.0.1:$(port_of gobare)" "${tls[@]}" >"$work/gobare.log" 2>&1 &
		;;
	h2own) "${pin[@]}" "${gmp[@]}" "$work/h2own" -listen "127.0.0.1:$(port_of h2own)" -cert "$work/cert.pem" -key "$work/key.pem" >"$work/h2own.log" 2>&1 & ;;
	goroutines) "${pin[@]}" "${gmp[@]}" env FULCRUM_GATEWAY_EVENT_LOOP=off "$work/fulcrum" gateway --config "$work/fulcrum.yaml" >"$work/goroutines.log" 2>&1 & ;;
	esac
	cur=$!
	for _ in $(seq 100); do
		if curl -fsk "$scheme://127.0.0.1:$(port_of "$1")/" >/dev/null 2>&1; then
			if [ "$PROTO" != http ] && [ "${round:-}" = 1 ]; then
				echo "$1: $(openssl s_client -alpn "$([ "$PROTO" = h2 ] && echo h2 || echo http/1.1)" -connect "127.0.0.1:$(port_of "$1")" </dev/null 2>/dev/null |
					awk '/^New, |^Server Temp Key|^ALPN protocol/ {printf "%s; ", $0}')" >&2
			fi
			return 0
		fi
		sleep 0.1
	done
	echo "$1 did not come up; log:" >&2
	cat "$work/$1.log" >&2 || true
	return 1
}

stop() {
	[ "$1" = direct ] && return 0
	kill "$cur" 2>/dev/null || true
	wait "$cur" 2>/dev/null || true
	cur= # reaped: cleanup must not kill a reused pid
	sleep 0.5
}

# cpu_ticks is the proxy's CPU time so far, in clock ticks: pinned, the
# busy time (user, nice, system, irq, softirq, steal) of its cores from
# /proc/stat; unpinned, utime+stime of its process and children (nginx's
# workers). 0 for the direct row.
cpu_ticks() {
	[ "$1" = direct ] && { echo 0; return; }
	if [ "$P" -gt 0 ]; then
		awk -v n="$P" '$1 ~ /^cpu[0-9]+$/ { c = substr($1, 4) + 0; if (c < n) s += $2 + $3 + $4 + $7 + $8 + $9 } END { print s + 0 }' /proc/stat
		return
	fi
	stat_ticks '$14 + $15'
}

# sys_ticks is the kernel's part of cpu_ticks (stime), unpinned only: a
# request's loopback writes run the receiver's TCP path in the sender's
# system time, a floor every proxy pays alike.
sys_ticks() {
	[ "$1" = direct ] || [ "$P" -gt 0 ] && { echo 0; return; }
	stat_ticks '$15'
}

# stat_ticks sums an awk expression of /proc/PID/stat fields over the
# proxy's processes.
stat_ticks() {
	local sum=0 pid
	for pid in $(proxy_pids); do
		[ -r "/proc/$pid/stat" ] || continue
		sum=$((sum + $(awk "{print $1}" "/proc/$pid/stat")))
	done
	echo "$sum"
}

# proxy_pids lists the proxy's processes (nginx: master and workers).
proxy_pids() { echo "$cur" $(pgrep -P "$cur" 2>/dev/null); }

# csw is the proxy's context switches so far (COUNTS=1), over all its
# threads: /proc/PID/status alone counts only the main thread.
csw() {
	[ "$1" = direct ] && { echo 0; return; }
	local pid
	for pid in $(proxy_pids); do cat /proc/"$pid"/task/*/status 2>/dev/null; done |
		awk '/^(voluntary|nonvoluntary)_ctxt_switches:/ {s += $2} END {print s + 0}'
}

# syscalls_per_req runs a further wrk with perf counting the proxy's
# syscalls (COUNTS=1).
syscalls_per_req() {
	if [ "$1" = direct ] || ! command -v perf >/dev/null; then echo -; return; fi
	local out
	out=$(perf stat -x, -e raw_syscalls:sys_enter -p "$(proxy_pids | tr ' ' ,)" -- \
		bash -c "$(declare -f drive port_of); $(declare -p load_pin PROTO scheme THREADS CONNS STREAMS work PORT_OFFSET THINK_MS root); drive $1 $COUNT_DURATION" 2>"$work/perf.txt") || { echo -; return; }
	awk -v n="$(echo "$out" | awk '/requests in/ {print $1}')" -F, '/raw_syscalls/ && n > 0 { printf "%.2f", $1 / n; f = 1 } END { if (!f) print "-" }' "$work/perf.txt"
}

# drive runs the load for $2 against proxy $1 and prints wrk's report:
# wrk itself, or for h2 h2load's figures in wrk's words (Requests/sec,
# "N requests in", the 50% and 99% latency lines from h2load's
# per-request log, non-2xx responses).
drive() {
	local url="$scheme://127.0.0.1:$(port_of "$1")/"
	if [ "$PROTO" != h2 ]; then
		local think=()
		[ -n "$THINK_MS" ] && think=(-s "$root/bench/proxy/think.lua")
		"${load_pin[@]}" env THINK_MS="$THINK_MS" wrk -t"$THREADS" -c"$CONNS" -d"$2" --latency "${think[@]}" "$url"
		return
	fi
	local out
	out=$("${load_pin[@]}" h2load -c"$CONNS" -m"$STREAMS" -t"$THREADS" -D"$2" --log-file="$work/h2.log" "$url" 2>&1) || true
	echo "$out" | awk '/^finished in/ {gsub(",", "", $4); print "Requests/sec: " $4}
		/^requests:/ {print $8 " requests in"; if ($10 + $12 > 0) print "Non-2xx or Socket errors: " $10 " failed " $12 " errored"}
		/^status codes:/ {n = $5 + $7 + $9; if (n > 0) print "Non-2xx responses: " n}'
	sort -n -k3,3 "$work/h2.log" | awk -F'\t' '{d[NR] = $3} END {
		if (!NR) exit
		a = int(NR * 0.5); b = int(NR * 0.99); if (a < 1) a = 1; if (b < 1) b = 1
		printf "50%% %.2fms\n99%% %.2fms\n", d[a] / 1000, d[b] / 1000 }'
}

# to_ms converts wrk's 812.00us / 1.23ms / 1.02s to milliseconds.
to_ms() {
	awk -v v="$1" 'BEGIN {
		if (v ~ /us$/) { sub(/us$/, "", v); printf "%.2f", v/1000 }
		else if (v ~ /ms$/) { sub(/ms$/, "", v); printf "%.2f", v }
		else if (v ~ /s$/) { sub(/s$/, "", v); printf "%.2f", v*1000 }
		else print v }'
}

for _ in $(seq 3); do curl -fs http://$U1/ >/dev/null 2>&1 && break; sleep 0.3; done
[ "$PROTO" = h2 ] && ! command -v h2load >/dev/null && { echo "PROTO=h2 needs h2load (nghttp2-client)" >&2; exit 1; }

results="$work/results.txt"
: >"$results"
for round in $(seq "$ROUNDS"); do
	for P in $CORE_SETS; do
		for p in $ONLY; do
			start "$p"
			drive "$p" 1s >/dev/null 2>&1 || true # warm-up
			[ -n "$COUNTS" ] && s0=$(csw "$p")
			t0=$(cpu_ticks "$p") k0=$(sys_ticks "$p")
			out=$(drive "$p" "$DURATION")
			t1=$(cpu_ticks "$p") k1=$(sys_ticks "$p")
			counts=
			if [ -n "$COUNTS" ]; then
				s1=$(csw "$p")
				counts="$(awk -v a="$s0" -v b="$s1" -v n="$(echo "$out" | awk '/requests in/ {print $1}')" 'BEGIN { printf "%.2f", (n > 0) ? (b - a) / n : 0 }') $(syscalls_per_req "$p")"
			fi
			rps=$(echo "$out" | awk '/^Requests\/sec/ {print $2}')
			reqs=$(echo "$out" | awk '/requests in/ {print $1}')
			# The proxy's CPU time per request: on a shared machine a
			# steadier measure than req/s.
			cpu=$(awk -v a="$t0" -v b="$t1" -v n="$reqs" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.1f", (n > 0) ? (b - a) / hz * 1e6 / n : 0 }')
			sys=$(awk -v a="$k0" -v b="$k1" -v n="$reqs" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.1f", (n > 0) ? (b - a) / hz * 1e6 / n : 0 }')
			p50=$(to_ms "$(echo "$out" | awk '$1=="50%" {print $2}')")
			p99=$(to_ms "$(echo "$out" | awk '$1=="99%" {print $2}')")
			errs=$(echo "$out" | awk '/Non-2xx|Socket errors/ {print}' | tr '\n' ' ')
			echo "$round $p@$P $rps $p50 $p99 $cpu ${counts:-- -} $errs" >>"$results"
			echo "round $round: $p$([ "$P" -gt 0 ] && echo " on $P cores") $rps req/s p50 ${p50}ms p99 ${p99}ms cpu ${cpu}us/req (sys ${sys})${counts:+ csw/req, syscalls/req: $counts} $errs" >&2
			stop "$p"
		done
	done
done

median() { sort -n | awk '{a[NR]=$1} END {print (NR ? a[int((NR+1)/2)] : 0)}'; }

for P in $CORE_SETS; do
	echo
	if [ "$P" -gt 0 ]; then
		echo "proxy pinned to cores 0-$((P - 1)) ($P threads/workers), wrk and upstreams on cores $maxset-$((NCPU - 1))"
		base=nginx label="vs nginx"
	else
		base=fulcrum label="vs Fulcrum"
	fi
	if [ -n "${BASE:-}" ]; then base=$BASE label="vs $BASE"; fi # the row the ratio compares with
	case $PROTO in
	http) load="wrk -t$THREADS -c$CONNS -d$DURATION, keep-alive" ;;
	tls) load="wrk -t$THREADS -c$CONNS -d$DURATION https, keep-alive, TLS 1.3 TLS_AES_128_GCM_SHA256" ;;
	h2) load="h2load -c$CONNS -m$STREAMS -t$THREADS -D$DURATION, HTTP/2 over TLS 1.3 TLS_AES_128_GCM_SHA256" ;;
	esac
	[ -n "$THINK_MS" ] && [ "$PROTO" != h2 ] && load="$load, ${THINK_MS} ms between a connection's requests"
	echo "$load, 3 upstreams, round robin; median of $ROUNDS interleaved rounds; $NCPU CPUs, load avg $(cut -d' ' -f1-3 /proc/loadavg)"
	echo
	printf "| %-10s | %10s | %8s | %8s | %12s | %12s |" proxy "req/s" "p50 ms" "p99 ms" "CPU us/req" "$label"
	[ -n "$COUNTS" ] && printf " %10s | %12s |" "csw/req" "syscalls/req"
	printf "\n|%s|%s|%s|%s|%s|%s|" "------------" "------------" "----------" "----------" "--------------" "--------------"
	[ -n "$COUNTS" ] && printf "%s|%s|" "------------" "--------------"
	echo
	brps=$(awk -v k="$base@$P" '$2==k {print $3}' "$results" | median)
	for p in $ONLY; do
		# The CPU column is its own median (not the median req/s round's).
		c=$(awk -v k="$p@$P" '$2==k {print $6}' "$results" | median)
		awk -v k="$p@$P" '$2==k {print $3, $4, $5}' "$results" | sort -n |
			awk -v p="$p" -v f="$brps" -v c="$c" '{r[NR]=$1; a[NR]=$2; b[NR]=$3}
				END { m=int((NR+1)/2); ratio = (f > 0) ? sprintf("%.2fx", r[m]/f) : "-";
				      printf "| %-10s | %10.0f | %8.2f | %8.2f | %12s | %12s |", p, r[m], a[m], b[m], c, ratio }'
		if [ -n "$COUNTS" ]; then
			printf " %10s | %12s |" "$(awk -v k="$p@$P" '$2==k {print $7}' "$results" | median)" \
				"$(awk -v k="$p@$P" '$2==k {print $8}' "$results" | median)"
		fi
		echo
	done
done
