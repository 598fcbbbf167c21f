#!/usr/bin/env bash
# Runs the room simulator, a supervisor and three workers on localhost.
# Unique messages go to stdout (the stdout sink); logs go to stderr.
# Ctrl-C stops everything.
#
#   go build -o /tmp/fulcrum ./cmd/fulcrum && FULCRUM=/tmp/fulcrum examples/supervisor/run.sh
set -euo pipefail
FULCRUM=${FULCRUM:-fulcrum}
DIR=$(cd "$(dirname "$0")" && pwd)
TOKEN=demo-token

pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM

"$FULCRUM" sim rooms --listen 127.0.0.1:7400 --rooms 12 --rate 1 &
pids+=($!)
"$FULCRUM" supervisor --config "$DIR/supervisor.yaml" &
pids+=($!)
for i in 1 2 3; do
  "$FULCRUM" supervisor worker --supervisor ws://127.0.0.1:7300/ws --token "$TOKEN" \
    --id "worker-$i" --max-load 10 --sim http://127.0.0.1:7400 &
  pids+=($!)
done

cat >&2 <<MSG

  simulator   http://127.0.0.1:7400/stats
  supervisor  curl -s -H 'Authorization: Bearer $TOKEN' http://127.0.0.1:7300/tasks
              curl -s -H 'Authorization: Bearer $TOKEN' http://127.0.0.1:7300/workers
              curl -s -H 'Authorization: Bearer $TOKEN' http://127.0.0.1:7300/metrics | grep fulcrum_supervisor
  warm-up ends 5 s after start; then each of the 12 rooms is watched by 2 workers.
  Kill one worker (kill <pid>) and its rooms move to the others within 31 s.

MSG
wait
