#!/usr/bin/env bash
# Starts a local tenure cluster of three agents on 127.0.0.1, shows what each
# one sees, kills the leader with SIGKILL, and shows the new leader with a
# higher epoch once the old leader's lease has run out (quorum mode, a 2s
# lease TTL). Everything it creates lives in a temporary directory that is
# removed on exit.
#
#   ./examples/local-cluster/run.sh            # three agents, then exit
#   KEEP=1 ./examples/local-cluster/run.sh     # leave them running until Ctrl-C
#   BASE_PORT=27000 ./examples/local-cluster/run.sh
set -euo pipefail

cd "$(dirname "$0")/../.."
base=${BASE_PORT:-17946}
nodes=${NODES:-3}
work=$(mktemp -d "${TMPDIR:-/tmp}/tenure-local.XXXXXX")
pids=()

cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT INT TERM

say() { printf '\n== %s\n' "$*"; }

say "building tenure"
go build -o "$work/tenure" ./cmd/tenure
tenure="$work/tenure"

start_agent() {
  local i=$1
  "$tenure" agent --name "node$i" --id "$i" \
    --bind "127.0.0.1:$((base + 2 * i))" --peer-bind "127.0.0.1:$((base + 2 * i + 1))" \
    --join "127.0.0.1:$((base + 2))" \
    --socket "$work/node$i.sock" --data-dir "$work/data$i" \
    --expect "$nodes" --lease-ttl "${LEASE_TTL:-2s}" \
    --timing local --log-level warn 2>>"$work/node$i.log" &
  pids[$i]=$!
}

# wait_leader OLD SOCKET...: until every socket names the same leader, and
# it is not OLD.
wait_leader() {
  local old=$1
  shift
  for _ in $(seq 1 150); do
    local seen=()
    for s in "$@"; do seen+=("$("$tenure" leader --socket "$s" 2>/dev/null || echo none)"); done
    if [[ "${seen[0]}" != none && "${seen[0]}" != "$old" ]] && [[ $(printf '%s\n' "${seen[@]}" | sort -u | wc -l) -eq 1 ]]; then
      echo "${seen[0]}"
      return 0
    fi
    sleep 0.1
  done
  echo "no agreed leader after 15s; logs in $work" >&2
  return 1
}

say "starting $nodes agents on 127.0.0.1 (gossip ports $((base + 2))..$((base + 2 * nodes)))"
for i in $(seq 1 "$nodes"); do start_agent "$i"; done
sockets=()
for i in $(seq 1 "$nodes"); do sockets+=("$work/node$i.sock"); done

say "waiting for the cluster to agree on a leader"
wait_leader "" "${sockets[@]}"

for i in $(seq 1 "$nodes"); do
  say "tenure status (node$i)"
  "$tenure" status --socket "$work/node$i.sock"
done
say "tenure members (node1)"
"$tenure" members --socket "$work/node1.sock"

if [[ -n "${KEEP:-}" ]]; then
  say "agents keep running; try: $tenure watch --socket $work/node1.sock   (Ctrl-C here stops them)"
  wait
  exit 0
fi

old=$("$tenure" leader --socket "$work/node1.sock")
lid=$("$tenure" leader --json --socket "$work/node1.sock" | sed -n 's/.*"id":\([0-9]*\).*/\1/p')
say "kill -9 the leader (node$lid) and wait for the next one"
{ kill -9 "${pids[$lid]}" && wait "${pids[$lid]}"; } 2>/dev/null || true
unset "pids[$lid]"
rest=()
for i in $(seq 1 "$nodes"); do [[ $i == "$lid" ]] || rest+=("$work/node$i.sock"); done
wait_leader "$old" "${rest[@]}"
say "tenure status (node1)"
"$tenure" status --socket "$work/node1.sock"
say "done: the new leader has a higher epoch; stopping the agents"
