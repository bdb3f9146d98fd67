# Shared by the examples' demo scripts (source it): step headings, failing
# with the end of every log, and polling while the agents run. The script
# sets $work (its temporary directory, with the agents' *.log files) and the
# array agents (the agents' PIDs, by node number) before it calls these.

say() { printf '\n== %s\n' "$*"; }

# fail MESSAGE: print it and the end of every log, then exit 1.
fail() {
  echo "${0##*/}: $*" >&2
  for f in "$work"/*.log; do
    printf -- '--- %s\n' "${f##*/}" >&2
    tail -n 15 "$f" >&2
  done
  exit 1
}

# wait_until SECONDS DESCRIPTION COMMAND...: poll COMMAND every 0.2s; give
# up early when an agent that should run has exited.
wait_until() {
  local secs=$1 what=$2 i
  shift 2
  for _ in $(seq 1 $((secs * 5))); do
    if "$@"; then return 0; fi
    for i in "${!agents[@]}"; do
      kill -0 "${agents[i]}" 2>/dev/null || fail "node$i's agent exited"
    done
    sleep 0.2
  done
  fail "no $what after ${secs}s"
}
