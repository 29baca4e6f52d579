#!/usr/bin/env bash
# Run a Procfile with honcho (`make run`), and stop every process it started on Ctrl-C, SIGTERM,
# SIGHUP or any exit, however this script's output is piped (`make run 2>&1 | tee log`).
#
# Why not plain honcho: honcho starts each process in a session of its own, so only honcho can
# stop them; with its output piped, Ctrl-C also ends the reader (tee), honcho dies of a broken
# pipe at its first "SIGINT received" line, and the API, workers, beat and Flower run on.
# Here honcho leads a session of its own (the terminal's Ctrl-C reaches only this script), its
# output goes through a relay that never fails, and this script stops the sessions itself.
#
#   deploy/run.sh [PROCFILE]    (default deploy/Procfile; run from the directory it expects)
set -uo pipefail
procfile=${1:-deploy/Procfile}
HONCHO=${HONCHO:-honcho}
#: Seconds the processes get to stop (Celery's warm shutdown) before they are killed.
STOP_SECONDS=${EVIDENCE_RUN_STOP_SECONDS:-15}

relay() {
  # Copy honcho's lines to our output; once the reader is gone, keep draining and discard.
  trap '' INT TERM HUP PIPE
  while IFS= read -r line || [ -n "$line" ]; do
    printf '%s\n' "$line" 2>/dev/null
  done
}

sessions_of() {
  # The sessions of process $1 and of all its descendants, except this script's own (the
  # relay is honcho's child, in ours).
  local own
  own=$(ps -o sid= -p $$)
  ps -e -o pid= -o ppid= -o sid= | awk -v root="$1" -v own="$own" '
    { parent[$1] = $2; sid[$1] = $3 }
    END {
      for (p in parent) {
        q = p
        while (q != root && (q in parent) && q > 1) q = parent[q]
        if (q == root && sid[p] != own) seen[sid[p]] = 1
      }
      for (s in seen) print s
    }'
}

alive_in() {  # alive_in SID...: whether any process is left in these sessions
  local sid
  for sid in "$@"; do pgrep -s "$sid" >/dev/null && return 0; done
  return 1
}

stopped=0
stop_all() {
  [ "$stopped" = 1 ] && return
  stopped=1
  trap '' INT TERM HUP
  local sids sid
  # shellcheck disable=SC2207
  sids=($(sessions_of "$honcho"))
  [ "${#sids[@]}" -gt 0 ] || return 0
  for sid in "${sids[@]}"; do pkill -TERM -s "$sid" 2>/dev/null; done
  local deadline=$((SECONDS + STOP_SECONDS))
  while alive_in "${sids[@]}" && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.2; done
  for sid in "${sids[@]}"; do pkill -KILL -s "$sid" 2>/dev/null; done
  wait "$honcho" 2>/dev/null
}

trap stop_all EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# setsid: this script's background jobs are not group leaders, so setsid execs honcho in place
# and $! is honcho's pid, which is also its session id.
setsid "$HONCHO" -f "$procfile" -d . start > >(relay) 2>&1 &
honcho=$!
wait "$honcho"
