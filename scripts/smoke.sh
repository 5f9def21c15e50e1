#!/usr/bin/env bash
# Starts the compiled binary from an empty directory on a fresh database and checks that it
# answers health, docs and a billed look-up set up entirely through its own CLI.
set -euo pipefail
binary=$(realpath "$1")
work=$(mktemp -d)
cd "$work"
export DATABASE_URL="sqlite:$work/smoke.db" PORT="${SMOKE_PORT:-18787}" LOG_LEVEL=warn
base="http://127.0.0.1:$PORT"

"$binary" --version
org=$("$binary" orgs create --name "Smoke Org" --json | grep -o '"id": *"[^"]*"' | head -1 | cut -d'"' -f4)
"$binary" credits grant --org "$org" --amount 5 --json >/dev/null
key=$("$binary" keys create --org "$org" --name smoke --json | grep -o '"clearKey": *"[^"]*"' | cut -d'"' -f4)
printf '{"gtin":"4006381333931","title":"Pen","merchantId":"m1","price":"1.99","currency":"EUR","observedAt":"%s"}\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" > feed.ndjson
"$binary" import feed.ndjson --json

"$binary" serve > serve.log 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 1 50); do curl -fsS "$base/healthz" >/dev/null 2>&1 && break; sleep 0.1; done

curl -fsS "$base/healthz" | grep -q '"ok"'
curl -fsS "$base/readyz" | grep -q '"ready"'
curl -fsS "$base/docs" | grep -q '/docs/assets/scalar.js'
curl -fsS "$base/openapi.json" | grep -q 'getProductPrice'
answer=$(curl -fsS -H "Authorization: Bearer $key" "$base/api/v1/products/4006381333931/price")
echo "$answer" | grep -q '"reason":"fresh-offer"'
echo "$answer" | grep -q '"creditsConsumed":1'
echo "$answer" | grep -q '"creditsRemaining":4'
code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer ${key}x" "$base/api/v1/products/4006381333931/price")
[ "$code" = 401 ]

kill -TERM $pid
wait $pid
"$binary" credits balance --org "$org" --json | grep -q '"available": 4'
echo "smoke: ok (billed look-up from the compiled binary, clean shutdown)"
