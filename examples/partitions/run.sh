#!/usr/bin/env bash
# Five workers sharing a queue's ten partitions, fencing their writes: a
# fenced store (one fence per key) and five tenure agents on 127.0.0.1, and
# on each "host" `tenure run --group queue --partitions 10 -- worker.sh`,
# which writes to the key part-N of every partition N it holds with that
# partition's token. The script shows the assignment, kills one worker's
# agent with SIGKILL (a crashed host), shows its partitions moving to the
# other workers once their leases ran out, shows the store refusing a late
# write with the old owner's token (409) while the new owners' writes land,
# and prints the store's per-key tokens. Everything it creates lives in a
# temporary directory that is removed on exit, even on Ctrl-C or failure.
#
#   ./examples/partitions/run.sh
#   BASE_PORT=28946 ./examples/partitions/run.sh
#
# It listens on 127.0.0.1, TCP and UDP ports BASE_PORT+1 to BASE_PORT+11.
# Needs Go, bash and curl: it builds tenure and the store from this checkout.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
base=${BASE_PORT:-29946}
nodes=5
group=queue
parts=10
store_url=http://127.0.0.1:$((base + 1))

command -v curl >/dev/null || { echo "run.sh: needs curl (the workers write to the store with it)" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/tenure-partitions.XXXXXX")
store_pid=
agents=() # agents[i]: node i's agent
runs=()   # runs[i]: node i's `tenure run --group`

cleanup() {
  set +e
  # SIGTERM: each `tenure run` stops its worker first; then the agents and
  # the store.
  for pid in ${runs[@]+"${runs[@]}"}; do kill "$pid" 2>/dev/null; done
  for pid in ${runs[@]+"${runs[@]}"}; do wait "$pid" 2>/dev/null; done
  for pid in ${agents[@]+"${agents[@]}"}; do kill "$pid" 2>/dev/null; done
  [[ -n $store_pid ]] && kill "$store_pid" 2>/dev/null
  wait 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# say, fail and wait_until.
# shellcheck source=../lib/demo.sh
source "$(dirname "$0")/../lib/demo.sh"

tenure() { "$work/tenure" "$@"; }
sock() { echo "$work/node$1.sock"; }

# assignment SOCKET: `tenure partitions queue` asked of that node's agent
# (it answers with the leader's table).
assignment() { tenure partitions --socket "$1" "$group" 2>/dev/null; }

# holders_of TABLE: "PARTITION HOLDER TOKEN" for each held partition.
holders_of() { awk 'NR > 1 && $2 != "-" { print $1, $2, $3 }' <<<"$1"; }

# balanced SOCKET: every partition is held and every live member holds its
# share (parts/members, rounded down or up).
balanced() {
  local members=$2 held counts
  held=$(holders_of "$(assignment "$1")") || return 1
  [[ $(grep -c . <<<"$held") -eq $parts ]] || return 1
  counts=$(awk '{ n[$2]++ } END { for (h in n) print n[h] }' <<<"$held")
  [[ $(grep -c . <<<"$counts") -eq $members ]] || return 1
  local lo=$((parts / members)) hi=$(((parts + members - 1) / members)) c
  for c in $counts; do ((c >= lo && c <= hi)) || return 1; done
}

# written P TOKEN: the store holds a value of part-P written with TOKEN.
written() {
  curl -sS -i "$store_url/kv/part-$1" 2>/dev/null | tr -d '\r' | grep -qx "Fencing-Token: $2"
}

# all_written SOCKET: every held partition's key holds its holder's write.
all_written() {
  local p h tok
  while read -r p h tok; do written "$p" "$tok" || return 1; done < <(holders_of "$(assignment "$1")")
}

# agreed: every agent names the same leader.
agreed() {
  local i seen=()
  for i in "${!agents[@]}"; do seen+=("$(tenure leader --socket "$(sock "$i")" 2>/dev/null || echo none)"); done
  [[ ${seen[0]} != none ]] && [[ $(printf '%s\n' "${seen[@]}" | sort -u | wc -l) -eq 1 ]]
}

say "building tenure and the fenced store"
(cd "$root" && go build -o "$work/tenure" ./cmd/tenure && go build -o "$work/fenced-store" ./examples/fenced-store)

say "starting the fenced store with one fence per key on 127.0.0.1:$((base + 1))"
"$work/fenced-store" --data-dir "$work/store" --listen "127.0.0.1:$((base + 1))" --fence per-key \
  >>"$work/store.log" 2>&1 &
store_pid=$!

say "starting $nodes agents (quorum mode, --lease-ttl 2s --timing local)"
for i in $(seq 1 "$nodes"); do
  # The binary itself, not the tenure function: $! must be the agent's PID.
  "$work/tenure" agent --name "node$i" --id "$i" --socket "$(sock "$i")" \
    --bind "127.0.0.1:$((base + 2 * i))" --peer-bind "127.0.0.1:$((base + 2 * i + 1))" \
    --join "127.0.0.1:$((base + 2))" --data-dir "$work/data$i" \
    --expect "$nodes" --lease-ttl 2s --timing local \
    --log-level warn >>"$work/agent$i.log" 2>&1 &
  agents[i]=$!
done
wait_until 30 "leader all agents agree on" agreed
wait_until 10 "fenced store answering on $store_url" curl -fsS -o /dev/null "$store_url/fence"
echo "leader: $(tenure leader --socket "$(sock 1)")"

say "on each node: tenure run --grace 500ms --group $group --partitions $parts -- worker.sh"
for i in $(seq 1 "$nodes"); do
  # The grace must be shorter than what is left of a partition's lease
  # after a renewal (its TTL is twice the 2s lease TTL here).
  STORE_URL=$store_url WORKER=node$i "$work/tenure" run --socket "$(sock "$i")" --grace 500ms \
    --group "$group" --partitions "$parts" -- "$here/worker.sh" >>"$work/run$i.log" 2>&1 &
  runs[i]=$!
done
wait_until 45 "even assignment of the $parts partitions over $nodes workers" balanced "$(sock 1)" "$nodes"
wait_until 20 "write by every partition's holder with its token" all_written "$(sock 1)"

say "the assignment (tenure partitions $group)"
before=$(assignment "$(sock 1)")
echo "$before"
held=$(holders_of "$before")
echo "partitions held: $(grep -c . <<<"$held") of $parts, by $(awk '{ print $2 }' <<<"$held" | sort -u | wc -l) workers"

# The victim: the node holding partitions with the highest ID that does not
# lead (a crash of the leader works too, but adds an election and the
# grace of a new leader to the wait).
leader_id=$(tenure leader --json --socket "$(sock 1)" | sed -n 's/.*"id":\([0-9]*\).*/\1/p')
victim=
for i in $(seq "$nodes" -1 1); do
  if [[ $i != "$leader_id" ]] && awk -v h="node$i" '$2 == h { f = 1 } END { exit !f }' <<<"$held"; then
    victim=$i
    break
  fi
done
[[ -n $victim ]] || fail "no member other than the leader holds a partition"
moved=$(awk -v h="node$victim" '$2 == h { print $1 }' <<<"$held" | tr '\n' ' ')
moved=${moved% }
declare -A old_token
while read -r p h tok; do [[ $h == "node$victim" ]] && old_token[$p]=$tok; done <<<"$held"

say "kill -9 node$victim's agent (it holds partitions ${moved// /, }; node$leader_id leads)"
killed_at=$SECONDS
{ kill -9 "${agents[victim]}" && wait "${agents[victim]}"; } 2>/dev/null || true
unset "agents[victim]"
# node$victim's `tenure run` loses its agent and stops its worker; it
# stays, like a member whose agent crashed, and is stopped on exit.
worker_stopped() { grep -q "^worker node$victim ($group): stopped" "$work/run$victim.log"; }
wait_until 10 "stop of node$victim's worker" worker_stopped
echo "node$victim's tenure run lost its agent and stopped the worker:"
grep "^worker node$victim ($group): stopped" "$work/run$victim.log" | tail -n 1

say "waiting for partitions ${moved// /, } to move to the other workers (their leases run out on the leader first)"
survivor=$((victim == 1 ? 2 : 1))
wait_until 40 "move of node$victim's partitions" balanced "$(sock "$survivor")" $((nodes - 1))
wait_until 20 "write by every partition's new holder with its token" all_written "$(sock "$survivor")"
after=$(assignment "$(sock "$survivor")")
echo "$after"
echo "moved within $((SECONDS - killed_at))s of the kill:"
declare -A new_holder new_token
while read -r p h tok; do new_holder[$p]=$h new_token[$p]=$tok; done < <(holders_of "$after")
# stored_at P TOKEN first|last: when the store accepted the first or last
# write of part-P with TOKEN (from its log).
stored_at() {
  awk -v k="key=part-$1" -v t="token=$2" -v which="$3" '
    / msg=stored / && index($0, " " k " ") && index($0, " " t " ") { at = substr($1, 17, 12); if (which == "first") { print at; exit } }
    END { if (which == "last") print at }' "$work/store.log"
}
for p in $moved; do
  echo "  partition $p: node$victim (token ${old_token[$p]}) -> ${new_holder[$p]} (token ${new_token[$p]});" \
    "node$victim's last write stored at $(stored_at "$p" "${old_token[$p]}" last)," \
    "${new_holder[$p]}'s first at $(stored_at "$p" "${new_token[$p]}" first)"
done

p=${moved%% *}
say "node$victim's worker, late, writes to part-$p with its old token ${old_token[$p]}"
stale=$(curl -sS -i -X PUT -H "Fencing-Token: ${old_token[$p]}" --data "node$victim write (late)" "$store_url/kv/part-$p" | tr -d '\r')
echo "$stale" | sed -n '1p;$p'
grep -q '^HTTP/[0-9.]* 409' <<<"$stale" || fail "the late write was not refused with 409"

say "${new_holder[$p]}'s writes to part-$p with token ${new_token[$p]} keep landing"
value() { curl -sS "$store_url/kv/part-$p"; }
first=$(value)
sleep 1.5
second=$(value)
echo "part-$p: \"$first\", 1.5s later \"$second\""
[[ $first != "$second" && $second == "${new_holder[$p]} write "* ]] || fail "${new_holder[$p]}'s writes to part-$p did not land"

say "the store's per-key tokens (curl $store_url/fence)"
curl -sS "$store_url/fence"

say "done; stopping the workers, the agents and the store"
