#!/usr/bin/env bash
# A singleton job on a local tenure cluster: three agents on 127.0.0.1, and
# on each "host" the same job, tick.sh, which appends "EPOCH HOST TIME" to a
# shared file every 2 seconds while that host leads. The script waits for
# ticks, kills the leader's agent with SIGKILL, waits until ticks with a
# higher epoch come from another host, and prints the file. Everything it
# creates lives in a temporary directory that is removed on exit.
#
#   ./examples/singleton-cron/run-demo.sh              # tick.sh under `tenure run` (recommended)
#   MODE=hook ./examples/singleton-cron/run-demo.sh    # tick.sh started by a became-leader hook
#   BASE_PORT=28946 ./examples/singleton-cron/run-demo.sh
#
# Needs only Go (and bash): it builds tenure from this checkout.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
mode=${MODE:-run}
base=${BASE_PORT:-27946}
nodes=3
case $mode in
run | hook) ;;
*) echo "MODE must be run or hook, not $mode" >&2; exit 2 ;;
esac

work=$(mktemp -d "${TMPDIR:-/tmp}/tenure-cron.XXXXXX")
export TICK_FILE=$work/ticks.log  # the shared file of the singleton job
export TERMS_FILE=$work/terms.log # one line per term, from a short hook
export PATH=$work:$PATH           # tick.sh calls `tenure leader --check`
: >"$TICK_FILE"
: >"$TERMS_FILE"
agents=() # agents[i]: node i's agent
runs=()   # runs[i]: node i's `tenure run` (MODE=run)

cleanup() {
  set +e
  # SIGTERM: each `tenure run` stops its tick.sh first; each agent resigns
  # and leaves, and a tick.sh started by its hook sees it no longer leads.
  for pid in ${runs[@]+"${runs[@]}"}; do kill "$pid" 2>/dev/null; done
  for pid in ${agents[@]+"${agents[@]}"}; do kill "$pid" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# say, fail and wait_until.
# shellcheck source=../lib/demo.sh
source "$(dirname "$0")/../lib/demo.sh"

# ticks_from MIN_EPOCH NOT_HOST: how many lines have an epoch >= MIN_EPOCH
# and a host other than NOT_HOST.
ticks_from() { awk -v e="$1" -v h="$2" '$1 >= e && $2 != h { n++ } END { print n + 0 }' "$TICK_FILE"; }

# handed_over: 3 lines or more from a later term than the old leader's, and
# from another node.
handed_over() { [[ $(ticks_from $((old_epoch + 1)) "$old_host") -ge 3 ]]; }

# steady: the file has 3 lines or more and its last 2 come from one term.
steady() {
  [[ $(wc -l <"$TICK_FILE") -ge 3 ]] &&
    [[ $(tail -n 2 "$TICK_FILE" | awk '{ print $1, $2 }' | sort -u | wc -l) -eq 1 ]]
}

say "building tenure"
(cd "$root" && go build -o "$work/tenure" ./cmd/tenure)

if [[ $mode == run ]]; then
  say "starting $nodes agents, and on each: tenure run --grace 500ms -- tick.sh"
else
  say "starting $nodes agents, each with the hook became-leader=tick.sh (--hook-timeout 1h)"
fi

for i in $(seq 1 "$nodes"); do
  sock=$work/node$i.sock
  # Every hook run gets TENURE_SOCKET (this agent's socket) and the agent's
  # environment without its TENURE_* settings (TICK_FILE, TERMS_FILE and
  # PATH come through), so tick.sh's `tenure leader --check` reaches the
  # right agent. The short, one-run-per-term hook: one line in terms.log
  # when this node starts leading (if it still does when the hook runs).
  hooks=(--hook "became-leader=TICK_FILE=\"\$TERMS_FILE\" '$here/tick.sh' --once")
  if [[ $mode == hook ]]; then
    # The loop itself, in a hook whose run lasts the whole term: the hook
    # timeout must outlast the term, or the loop is killed while leading.
    hooks+=(--hook "became-leader='$here/tick.sh'" --hook-timeout 1h)
  fi
  "$work/tenure" agent --name "node$i" --id "$i" --socket "$sock" \
    --bind "127.0.0.1:$((base + 2 * i))" --peer-bind "127.0.0.1:$((base + 2 * i + 1))" \
    --join "127.0.0.1:$((base + 2))" --data-dir "$work/data$i" \
    --expect "$nodes" --lease-ttl 2s --timing local "${hooks[@]}" \
    --log-level warn >>"$work/agent$i.log" 2>&1 &
  agents[i]=$!
  if [[ $mode == run ]]; then
    # `tenure run` gives tick.sh TENURE_SOCKET=$sock, for its
    # `tenure leader --check`. The grace must be shorter than what is left
    # of the lease after a renewal (a 2s lease renewed every ~0.7s here):
    # with the default 5s the agent refuses the runner (a grace longer than
    # the TTL), and `tenure run` warns and retries without ever starting it.
    "$work/tenure" run --socket "$sock" --grace 500ms --log-level warn \
      -- "$here/tick.sh" >>"$work/run$i.log" 2>&1 &
    runs[i]=$!
  fi
done

say "waiting for ticks from the first leader"
wait_until 30 "steady ticks in $TICK_FILE" steady
read -r old_epoch old_host _ < <(tail -n 1 "$TICK_FILE")
old=${old_host#node}
cat "$TICK_FILE"

say "kill -9 the leader's agent ($old_host, epoch $old_epoch) and wait for ticks from the next leader"
{ kill -9 "${agents[old]}" && wait "${agents[old]}"; } 2>/dev/null || true
unset "agents[old]"
wait_until 30 "ticks with an epoch above $old_epoch from another node" handed_over

say "$TICK_FILE (EPOCH HOST TIME)"
cat "$TICK_FILE"
say "$TERMS_FILE (one line per term, from the short became-leader hook)"
cat "$TERMS_FILE"

read -r new_epoch new_host _ < <(tail -n 1 "$TICK_FILE")
last_old=$(awk -v h="$old_host" -v e="$old_epoch" '$1 == e && $2 == h { t = $3 } END { print t }' "$TICK_FILE")
first_new=$(awk -v h="$new_host" -v e="$new_epoch" '$1 == e && $2 == h { print $3; exit }' "$TICK_FILE")
late=$(awk -v e="$new_epoch" '$1 >= e { seen = 1 } seen && $1 < e { n++ } END { print n + 0 }' "$TICK_FILE")
say "handover: $old_host (epoch $old_epoch) last ticked at $last_old; $new_host (epoch $new_epoch) first ticked at $first_new"
echo "lines with an older epoch after the new term's first line: $late"
say "done; stopping the agents"
