#!/usr/bin/env bash
# Stoplight Prism's validating proxy in front of a running price-service: it forwards each request
# to the server and checks the request and the answer against the /openapi.json that server serves.
# With --errors, an answer the document does not describe becomes a 500 problem naming the
# violation (`sl-violations` header too), so a test suite run through the proxy fails on any drift
# between contract and behaviour. Requests are not validated (--validate-request=false): a suite
# sends wrong requests on purpose, and it is the service's answer to them that must match the
# document, not Prism's own 401/422.
# Usage: scripts/prism-proxy.sh <server URL> [proxy port, default 4010]   (stop it with SIGTERM)
set -euo pipefail
upstream=${1:?usage: scripts/prism-proxy.sh <server URL> [proxy port]}
port=${2:-4010}
repo=$(cd "$(dirname "$0")/.." && pwd)
document=$(mktemp --suffix .json)
trap 'rm -f "$document"' EXIT
curl -fsS "$upstream/openapi.json" -o "$document"
"$repo/node_modules/.bin/prism" proxy "$document" "$upstream" --errors --validate-request=false --host 127.0.0.1 --port "$port" &
prism=$!
trap 'kill "$prism" 2>/dev/null; wait "$prism" 2>/dev/null; rm -f "$document"' EXIT
trap 'exit 0' TERM INT
wait "$prism"
