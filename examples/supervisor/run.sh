#!/usr/bin/env bash
# Runs the room simulator, a supervisor and three workers on localhost.
# Unique messages go to stdout (the stdout sink), one JSON object a line;
# logs and this banner go to stderr. Ctrl-C stops everything.
#
#   examples/supervisor/run.sh > messages.jsonl
#
# A process that exits (one you stopped, say) does not end the demo: the
# script says so, with the command that starts it again, and keeps the
# others running until Ctrl-C or until none is left.
#
# It builds fulcrum from this checkout into a temporary directory (needs Go);
# FULCRUM=/path/to/fulcrum uses that binary instead. Ports already taken?
#
#   SIM_ADDR=127.0.0.1:17400 SUPERVISOR_ADDR=127.0.0.1:17300 examples/supervisor/run.sh
set -euo pipefail
DIR=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$DIR/../.." && pwd)
TOKEN=demo-token
SIM_ADDR=${SIM_ADDR:-127.0.0.1:7400}
SUPERVISOR_ADDR=${SUPERVISOR_ADDR:-127.0.0.1:7300}
# 12 rooms x k=2 = 24 holdings. Each worker may run 16, so after one of
# the three is lost the other two (32) still hold every room twice.
ROOMS=12
MAX_LOAD=16

tmp=$(mktemp -d)
pids=()
names=()
cmds=()
cleanup() {
  local pid
  for pid in "${pids[@]}"; do
    if [[ -n $pid ]]; then kill "$pid" 2>/dev/null || true; fi
  done
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

# The config with this run's addresses (the file as it is for the defaults).
sed -e "s|127.0.0.1:7300|$SUPERVISOR_ADDR|g" -e "s|127.0.0.1:7400|$SIM_ADDR|g" \
  "$DIR/supervisor.yaml" >"$tmp/supervisor.yaml"

# Where a restarted supervisor should print its messages: the file this
# script's stdout goes to, when it is one.
out=$(readlink "/proc/$$/fd/1" 2>/dev/null || true)
append=""
if [[ -f $out ]]; then append=" >> $(printf %q "$out")"; fi

# start NAME COMMAND...: runs COMMAND in the background and remembers it.
start() {
  local name=$1
  shift
  "$@" &
  pids+=($!)
  names+=("$name")
  local cmd
  cmd=$(printf '%q ' "$@")
  cmds+=("${cmd% }")
}

start simulator "$FULCRUM" sim rooms --listen "$SIM_ADDR" --rooms "$ROOMS" --rate 1
start supervisor "$FULCRUM" supervisor --config "$tmp/supervisor.yaml"
for i in 1 2 3; do
  start "worker-$i" "$FULCRUM" supervisor worker --supervisor "ws://$SUPERVISOR_ADDR/ws" --token "$TOKEN" \
    --id "worker-$i" --max-load "$MAX_LOAD" --sim "http://$SIM_ADDR" --drain-timeout 2s
done

# A process that fails to start (a port in use, say) must not leave a demo
# that looks alive: check each is still running once they have had a moment.
sleep 1
for i in "${!pids[@]}"; do
  if ! kill -0 "${pids[$i]}" 2>/dev/null; then
    code=0
    wait "${pids[$i]}" || code=$?
    echo "run.sh: ${names[$i]} (pid ${pids[$i]}) exited (status $code) at start; see the log above." >&2
    echo "run.sh: a port in use? Move them: SIM_ADDR=127.0.0.1:17400 SUPERVISOR_ADDR=127.0.0.1:17300 $0" >&2
    exit 1
  fi
done

{
  echo
  echo "  simulator   http://$SIM_ADDR/stats"
  echo "  supervisor  $FULCRUM supervisor status --url http://$SUPERVISOR_ADDR --token $TOKEN"
  echo "              curl -s -H 'Authorization: Bearer $TOKEN' http://$SUPERVISOR_ADDR/tasks"
  echo "              curl -s -H 'Authorization: Bearer $TOKEN' http://$SUPERVISOR_ADDR/metrics | grep fulcrum_supervisor"
  echo "  warm-up ends 5 s after start; then each of the $ROOMS rooms is watched by 2 workers."
  echo "  Stop one worker (kill <pid>: SIGTERM) and it drains: its rooms move to the"
  echo "  others first. kill -9 it instead and they move after worker_timeout (30 s)."
  echo
  echo "  PID      PROCESS      START IT AGAIN (in another shell) WITH"
  for i in "${!pids[@]}"; do
    printf '  %-8s %-12s %s%s\n' "${pids[$i]}" "${names[$i]}" "${cmds[$i]}" \
      "$([[ ${names[$i]} == supervisor ]] && echo "$append")"
  done
  echo
} >&2

# Report each process that exits, with how to start it again; keep the
# rest running. The demo ends with Ctrl-C, or when no process is left.
alive=${#pids[@]}
while ((alive > 0)); do
  sleep 1
  for i in "${!pids[@]}"; do
    pid=${pids[$i]}
    [[ -n $pid ]] || continue
    kill -0 "$pid" 2>/dev/null && continue
    code=0
    wait "$pid" || code=$?
    pids[$i]=""
    alive=$((alive - 1))
    restart=${cmds[$i]}
    if [[ ${names[$i]} == supervisor ]]; then restart+=$append; fi
    echo "run.sh: ${names[$i]} (pid $pid) exited (status $code); the others keep running." >&2
    echo "run.sh: start it again (in another shell) with: $restart" >&2
  done
done
echo "run.sh: every process has exited" >&2
