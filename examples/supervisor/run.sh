#!/usr/bin/env bash
# Runs the room simulator, a supervisor and three workers on localhost.
# Unique messages go to stdout (the stdout sink), one JSON object a line;
# logs and this banner go to stderr. Ctrl-C stops everything.
#
#   examples/supervisor/run.sh > messages.jsonl
#
# It builds fulcrum from this checkout into a temporary directory (needs Go);
# FULCRUM=/path/to/fulcrum uses that binary instead.
set -euo pipefail
DIR=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$DIR/../.." && pwd)
TOKEN=demo-token

tmp=$(mktemp -d)
pids=()
cleanup() {
  if ((${#pids[@]})); then kill "${pids[@]}" 2>/dev/null || true; fi
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [[ -n ${FULCRUM:-} ]]; then
  [[ -x $FULCRUM ]] || { echo "run.sh: FULCRUM=$FULCRUM is not an executable" >&2; exit 1; }
else
  echo "run.sh: building fulcrum into $tmp" >&2
  (cd "$ROOT" && go build -o "$tmp/fulcrum" ./cmd/fulcrum)
  FULCRUM=$tmp/fulcrum
fi

"$FULCRUM" sim rooms --listen 127.0.0.1:7400 --rooms 12 --rate 1 &
pids+=($!)
"$FULCRUM" supervisor --config "$DIR/supervisor.yaml" &
pids+=($!)
for i in 1 2 3; do
  "$FULCRUM" supervisor worker --supervisor ws://127.0.0.1:7300/ws --token "$TOKEN" \
    --id "worker-$i" --max-load 10 --sim http://127.0.0.1:7400 --drain-timeout 2s &
  pids+=($!)
done

# A process that fails to start (a port in use, say) must not leave a demo
# that looks alive: check each is still running once they have had a moment.
sleep 1
for pid in "${pids[@]}"; do
  if ! kill -0 "$pid" 2>/dev/null; then
    wait "$pid" || code=$?
    echo "run.sh: process $pid exited (status ${code:-0}) at start; see the log above" >&2
    exit 1
  fi
done

cat >&2 <<MSG

  simulator   http://127.0.0.1:7400/stats
  supervisor  $FULCRUM supervisor status --token $TOKEN
              curl -s -H 'Authorization: Bearer $TOKEN' http://127.0.0.1:7300/tasks
              curl -s -H 'Authorization: Bearer $TOKEN' http://127.0.0.1:7300/metrics | grep fulcrum_supervisor
  warm-up ends 5 s after start; then each of the 12 rooms is watched by 2 workers.
  Stop one worker (kill <pid>: SIGTERM) and it drains: its rooms move to the
  others first. kill -9 it instead and they move after worker_timeout (30 s).

MSG
# Any process that dies ends the demo with its status.
wait -n "${pids[@]}" || code=$?
echo "run.sh: a process exited (status ${code:-0}); stopping" >&2
exit "${code:-1}"
