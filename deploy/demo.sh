#!/usr/bin/env bash
# `make demo`: a local HTTPS site of sample pages and caption files, the whole service (API,
# worker, beat) on its own SQLite file and Redis database, one `evidence enqueue --wait` over
# the site's URL list, the results and a few metrics. Stops everything it started when done.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(pwd)/.venv/bin
DIR=var/demo
REDIS_DB=14   # the demo's own Redis database: never make run's queue
sessions=()

stop_all() {
  # Every process this script started leads its own session: TERM them, then KILL stragglers.
  for sid in "${sessions[@]}"; do pkill -TERM -s "$sid" 2>/dev/null || true; done
  for _ in $(seq 100); do
    alive=0
    for sid in "${sessions[@]}"; do pgrep -s "$sid" >/dev/null 2>&1 && alive=1; done
    [ "$alive" = 0 ] && break
    sleep 0.1
  done
  for sid in "${sessions[@]}"; do pkill -KILL -s "$sid" 2>/dev/null || true; done
}
trap stop_all EXIT
trap 'exit 130' INT TERM

free_port() { "$BIN/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_for() {  # wait_for SECONDS COMMAND...: retry COMMAND until it succeeds
  local deadline=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do
    [ "$SECONDS" -ge "$deadline" ] && { echo "demo: timed out waiting for: $*" >&2; return 1; }
    sleep 0.2
  done
}

rm -rf "$DIR" && mkdir -p "$DIR"
./deploy/ensure-services.sh >/dev/null
redis-cli -h 127.0.0.1 -n "$REDIS_DB" flushdb >/dev/null

echo "== 1. a local HTTPS site with sample pages and caption files (trustme certificates)"
setsid "$BIN/python" deploy/demo_site.py "$DIR" >"$DIR/site.log" 2>&1 &
sessions+=("$!")
wait_for 20 test -s "$DIR/site.env"
cat "$DIR/site.log"
set -a
# shellcheck disable=SC1091
. "$DIR/site.env"
EVIDENCE_DATABASE_URL="sqlite:///$(pwd)/$DIR/evidence.db"
EVIDENCE_BROKER_URL="redis://127.0.0.1:6379/$REDIS_DB"
EVIDENCE_SWEEP_INTERVAL_SECONDS=2
set +a
sed 's/^/   /' "$DIR/site.env"

echo "== 2. the service: migrate, a workspace and key, then API + worker + beat (honcho)"
"$BIN/evidence" migrate >/dev/null
workspace=$("$BIN/python" -c 'import uuid; print(uuid.uuid4())')
EVIDENCE_API_KEY=$("$BIN/evidence" keys create --workspace "$workspace" 2>/dev/null | tail -n 1)
export EVIDENCE_API_KEY
port=$(free_port)
cat >"$DIR/Procfile" <<PROCFILE
api: evidence api --port $port
worker: evidence worker --concurrency 4 --hostname demo-$$@%h
beat: evidence beat
PROCFILE
PATH="$BIN:$PATH" setsid "$BIN/honcho" -f "$DIR/Procfile" -d . start >"$DIR/service.log" 2>&1 &
sessions+=("$!")
api="http://127.0.0.1:$port"
wait_for 60 curl -sf "$api/readyz"
echo "   API $api   workspace $workspace   logs $DIR/service.log"

echo "== 3. evidence enqueue $DIR/urls.csv --wait (one line is planted broken)"
set +e
"$BIN/evidence" enqueue "$DIR/urls.csv" --workspace "$workspace" --kind url_text --api "$api" \
  --wait --out "$DIR/results.jsonl" --poll-interval 0.5 --timeout 120 2>&1
code=$?
set -e
echo "   exit code $code (1 = some line was invalid: the planted one; 0 = all lines went in)"

echo "== 4. what each line became ($DIR/results.jsonl)"
"$BIN/python" - "$DIR/results.jsonl" <<'PY'
import json, sys
from urllib.parse import urlsplit
for record in sorted(map(json.loads, open(sys.argv[1])), key=lambda r: r["line"]):
    where = urlsplit(record["url"] or "").path or record["url"]
    if "error" in record:
        print(f"   line {record['line']:>2}  {where or '-':<24} error: {record['error']['message']}")
        continue
    retrieval = record["retrieval"]
    result = retrieval["result"] or {}
    got = f"{len(result.get('segments') or [])} cues" if result.get("segments") else f"{len(result.get('text') or '')} chars"
    print(f"   line {record['line']:>2}  {where:<24} {retrieval['state']:<10} {result.get('status') or '-':<12}"
          f" {result.get('reason') or '-':<18} {got}")
PY

echo "== 5. a few of the API's /metrics"
curl -sf "$api/metrics" | grep -E '^evidence_(retrievals_created_total|retrievals_settled_total|fetch_duration_seconds_count|queue_depth)' | sed 's/^/   /'
echo "== done: stopping everything the demo started"
[ "$code" -le 1 ]
