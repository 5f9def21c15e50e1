#!/usr/bin/env bash
# Smoke test of the compiled executable, as an operator would run it: from an empty directory, on a
# fresh database, set up through its own CLI. Checks health, docs, the OpenAPI document, a billed
# look-up, metrics and the access log, SIGTERM with a request in flight (answered, exit 0), and a
# backup taken under load that restores with the same balance, ledger and key.
# Usage: scripts/smoke.sh dist/price-service
# Every wait is bounded; every failure names what failed and prints the server's log.
set -euo pipefail
binary=$(realpath "$1")
repo=$(cd "$(dirname "$0")/.." && pwd)
# Only to hold a SQLite write lock from another process (see "request in flight" below).
bun="$repo/node_modules/.bin/bun"
[ -x "$bun" ] || { echo "smoke: $bun is missing (npm install)" >&2; exit 1; }
work=$(mktemp -d)
cd "$work"
export DATABASE_URL="sqlite:$work/live.db" PRICE_ENV=production LOG_LEVEL=info
pids=()
trap 'for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; rm -rf "$work"' EXIT

fail() {
  echo "smoke: FAILED: $*" >&2
  for log in "$work"/*.log; do [ -f "$log" ] && { echo "--- $(basename "$log")" >&2; tail -n 20 "$log" >&2; }; done
  exit 1
}
# has TEXT COMMAND…: COMMAND succeeds and its output contains TEXT. The output is read whole first:
# `COMMAND | grep -q` stops reading at the first match, and under pipefail the writer's broken pipe
# ("curl: (23) Failure writing output") then fails a check that matched.
has() { local text=$1 output; shift; output=$("$@") && grep -qF -- "$text" <<<"$output"; }
# json_field NAME: the first string or number value of "NAME" in the JSON on standard input.
json_field() { grep -o "\"$1\": *\"\{0,1\}[^\",}]*" | head -1 | sed 's/.*: *"\{0,1\}//'; }

# start_serve DATABASE_URL LOG: starts `serve` on a port the system picks, sets $pid and $base.
start_serve() {
  PORT=0 DATABASE_URL="$1" "$binary" serve > "$work/$2" 2>&1 &
  pid=$!
  pids+=("$pid")
  base=""
  for _ in $(seq 1 100); do
    base=$(grep -o '"message":"listening","url":"[^"]*"' "$work/$2" 2>/dev/null | sed 's/.*"url":"//; s/"$//' || true)
    [ -n "$base" ] && break
    kill -0 "$pid" 2>/dev/null || fail "serve exited at start-up ($2)"
    sleep 0.1
  done
  [ -n "$base" ] || fail "serve did not report its address within 10 s ($2)"
  curl -fsS --max-time 5 "$base/healthz" > /dev/null || fail "$base/healthz did not answer"
}

# stop_serve: SIGTERM, then the exit code must be 0 within 15 s.
stop_serve() {
  kill -TERM "$pid"
  for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && fail "serve still running 15 s after SIGTERM"
  wait "$pid" && code=0 || code=$?
  [ "$code" = 0 ] || fail "serve exited $code after SIGTERM"
}

price() { curl -sS --max-time 10 -H "Authorization: Bearer $1" "$base/api/v1/products/4006381333931/price"; }

echo "== version and set-up through the CLI"
"$binary" --version
# Only serve, migrate and seed create a database; the operator's first step on an empty machine.
"$binary" migrate > /dev/null
org=$("$binary" orgs create --name "Smoke Org" --json | json_field id)
[ -n "$org" ] || fail "orgs create printed no id"
"$binary" credits grant --org "$org" --amount 5000 --json > /dev/null
key=$("$binary" keys create --org "$org" --name smoke --json | json_field clearKey)
[ -n "$key" ] || fail "keys create printed no clearKey"
printf '{"gtin":"4006381333931","title":"Pen","merchantId":"m1","price":"1.99","currency":"EUR","observedAt":"%s"}\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" > feed.ndjson
has '"offers": 1' "$binary" import feed.ndjson --json || fail "import did not write the offer"
[ "$(ls -A "$work" | grep -v -e '^live\.db' -e '^feed\.ndjson$' || true)" = "" ] || fail "the executable wrote files beside the database: $(ls -A "$work")"

echo "== serve: health, docs, OpenAPI, billed look-up, metrics, access log"
start_serve "$DATABASE_URL" serve.log
has '"ok"' curl -fsS "$base/healthz" || fail "/healthz"
has '"ready"' curl -fsS "$base/readyz" || fail "/readyz"
docs=$(curl -fsS "$base/docs") || fail "/docs"
grep -qF 'src="/docs/assets/scalar.js"' <<<"$docs" || fail "/docs does not load its embedded script"
grep -Eq '(src|href)="https?://' <<<"$docs" && fail "/docs refers to an external URL"
[ "$(curl -sS -o /dev/null -w '%{http_code} %{content_type}' "$base/docs/assets/scalar.js")" = "200 text/javascript; charset=utf-8" ] || fail "/docs/assets/scalar.js"
has '"operationId":"getProductPrice"' curl -fsS "$base/openapi.json" || fail "/openapi.json lacks getProductPrice"
answer=$(price "$key")
grep -qF '"reason":"fresh-offer"' <<<"$answer" || fail "look-up not fresh-offer: $answer"
grep -qF '"creditsConsumed":1' <<<"$answer" || fail "look-up not billed: $answer"
grep -qF '"creditsRemaining":4999' <<<"$answer" || fail "wrong balance after look-up: $answer"
[ "$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer ${key}x" "$base/api/v1/products/4006381333931/price")" = 401 ] || fail "a wrong key was not refused with 401"
sleep 0.2
has 'price_service_http_requests_total{method="GET",route="/api/v1/products/:gtin/price",status="200",reason="fresh-offer"} 1' curl -fsS "$base/metrics" || fail "/metrics does not count the billed look-up"
grep -q "\"keyPrefix\":\"${key:0:8}\",\"reason\":\"fresh-offer\"" serve.log || fail "no access-log line with the key prefix"
grep -q "$key" serve.log && fail "the log contains a whole API key"

echo "== SIGTERM with a request in flight"
# Another process holds the database's write lock, so the billed look-up waits in its commit;
# SIGTERM arrives meanwhile. The look-up must still be answered and serve must exit 0.
"$bun" -e '
  const { Database } = require("bun:sqlite");
  const database = new Database(process.argv[1]);
  database.exec("PRAGMA busy_timeout = 5000");
  database.exec("BEGIN IMMEDIATE");
  console.log("locked");
  await Bun.sleep(1500);
  database.exec("COMMIT");
' "$work/live.db" > lock.log 2>&1 &
locker=$!
pids+=("$locker")
for _ in $(seq 1 50); do grep -q locked lock.log && break; sleep 0.1; done
grep -q locked lock.log || fail "could not take the database lock"
price "$key" > inflight.json &
client=$!
sleep 0.4
kill -0 "$client" 2>/dev/null || fail "the look-up finished before SIGTERM; nothing was in flight"
stop_serve
wait "$client" || fail "the in-flight look-up failed"
grep -q '"creditsRemaining":4998' inflight.json || fail "the in-flight look-up was not answered in full: $(cat inflight.json)"
wait "$locker" || true
grep -q '"message":"shutting down","signal":"SIGTERM"' serve.log || fail "no shutdown line in the log"
has '"available": 4998' "$binary" credits balance --org "$org" --json || fail "balance after shutdown is not 4998"

echo "== backup under load, restore"
start_serve "$DATABASE_URL" load.log
load() { while [ ! -f "$work/stop-load" ]; do price "$key" > /dev/null || true; done; }
for _ in 1 2 3 4; do load & pids+=("$!"); done
sleep 1
"$binary" backup "$work/backup.db" --json > backup.json 2> backup.err || fail "backup failed: $(cat backup.err)"
sleep 0.5
touch "$work/stop-load"
wait "${pids[@]: -4}" 2>/dev/null || true
stop_serve
grep -q '"organizationsChecked": 1' backup.json || fail "backup did not check the ledger: $(cat backup.json)"
transactions=$(json_field credit_transactions < backup.json)
used=$((transactions - 1))
[ "$used" -gt 2 ] || fail "the backup was not taken under load ($used billed look-ups in it)"
final=$("$binary" credits balance --org "$org" --json | json_field available)
[ "$final" -lt $((5000 - used)) ] || fail "no look-up happened after the backup; it was not taken under load"

cp "$work/backup.db" "$work/restored.db"
restored="sqlite:$work/restored.db"
has "\"available\": $((5000 - used))," env DATABASE_URL="$restored" "$binary" credits balance --org "$org" --json || fail "restored balance is not $((5000 - used))"
has '"status": "ACTIVE"' env DATABASE_URL="$restored" "$binary" keys list --org "$org" --json || fail "restored key is not ACTIVE"
start_serve "$restored" restored.log
has "\"creditsRemaining\":$((5000 - used - 1))" price "$key" || fail "the key does not work on the restored database"
stop_serve

echo "smoke: ok (binary from an empty directory; billed look-up; in-flight request answered on SIGTERM, exit 0; backup under load ($used of $((5000 - final)) look-ups in it) restored with the same balance and key)"
