#!/usr/bin/env bash
# Measures how long a graceful stop (SIGTERM, what `systemctl stop` sends)
# takes, with real agent processes on 127.0.0.1 and the unit's settings:
# the default `lan` timing and the default 10s lease TTL. For each round it
# starts a fresh cluster of NODES agents (the highest ID leads), then stops
# them in one of three ways and prints how long each agent took to exit:
#
#   follower  SIGTERM to one voter that does not lead
#   leader    SIGTERM to the leader; also how long until another agent
#             reports a new leader (polled every 50ms with `tenure leader`)
#   cluster   SIGTERM to every agent at once (a whole-cluster shutdown)
#
#   ./examples/systemd/stop-times.sh                 # 3 agents, 3 rounds of each
#   ROUNDS=5 NODES=5 ./examples/systemd/stop-times.sh
#   BASE_PORT=29000 ./examples/systemd/stop-times.sh
#
# Everything it creates lives in a temporary directory removed on exit.
set -euo pipefail

cd "$(dirname "$0")/../.."
base=${BASE_PORT:-28946}
nodes=${NODES:-3}
rounds=${ROUNDS:-3}
work=$(mktemp -d "${TMPDIR:-/tmp}/tenure-stop.XXXXXX")
pids=()

cleanup() {
  set +e
  for pid in ${pids[@]+"${pids[@]}"}; do kill -9 "$pid" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

go build -o "$work/tenure" ./cmd/tenure
tenure=$work/tenure

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fs", b - a }'; }

# start_cluster ROUND: NODES fresh agents; returns once all agree on node$NODES.
start_cluster() {
  local r=$1 i
  pids=()
  for i in $(seq 1 "$nodes"); do
    "$tenure" agent --name "node$i" --id "$i" \
      --bind "127.0.0.1:$((base + 2 * i))" --peer-bind "127.0.0.1:$((base + 2 * i + 1))" \
      --join "127.0.0.1:$((base + 2))" --socket "$work/r$r-node$i.sock" \
      --data-dir "$work/r$r-data$i" --expect "$nodes" --log-level warn \
      2>>"$work/r$r-node$i.log" &
    pids[i]=$!
  done
  for _ in $(seq 1 600); do
    local agree=0
    for i in $(seq 1 "$nodes"); do
      "$tenure" leader --socket "$work/r$r-node$i.sock" 2>/dev/null | grep -q "^node$nodes " && agree=$((agree + 1))
    done
    [[ $agree == "$nodes" ]] && return 0
    sleep 0.1
  done
  echo "no leader after 60s; logs in $work" >&2
  exit 1
}

# stop_and_time PID...: SIGTERM every PID at once; set times to each one's
# time to exit, in the order given. (Not in a subshell: only this shell can
# wait for its agents.)
stop_and_time() {
  local t0 pid status out=()
  t0=$(now)
  for pid in "$@"; do kill -TERM "$pid"; done
  for pid in "$@"; do
    status=0
    wait "$pid" || status=$?
    out+=("$(elapsed "$t0" "$(now)")")
    [[ $status == 0 ]] || out[-1]+=" (exit status $status)"
  done
  times="${out[*]}"
}

round=0
for kind in follower leader cluster; do
  for _ in $(seq 1 "$rounds"); do
    round=$((round + 1))
    start_cluster "$round"
    case $kind in
    follower)
      stop_and_time "${pids[1]}"
      echo "follower (node1) stopped in $times"
      unset "pids[1]"
      ;;
    leader)
      t0=$(now)
      kill -TERM "${pids[nodes]}"
      new=""
      while [[ -z $new ]]; do
        new=$("$tenure" leader --socket "$work/r$round-node1.sock" 2>/dev/null | grep -v "^node$nodes " || true)
        [[ -n $new ]] || sleep 0.05
      done
      t1=$(now)
      status=0
      wait "${pids[nodes]}" || status=$?
      [[ $status == 0 ]] || echo "(the leader exited with status $status)" >&2
      t2=$(now)
      unset "pids[nodes]"
      echo "leader (node$nodes) stopped in $(elapsed "$t0" "$t2"); node1 reported the next leader ($new) after $(elapsed "$t0" "$t1")"
      ;;
    cluster)
      stop_and_time "${pids[@]}"
      echo "all $nodes agents stopped at once, exit times: $times"
      pids=()
      ;;
    esac
    # The rest of this round's cluster: stopped without measuring.
    {
      for pid in ${pids[@]+"${pids[@]}"}; do kill -9 "$pid" || true; done
      wait || true
    } 2>/dev/null
    pids=()
  done
done
