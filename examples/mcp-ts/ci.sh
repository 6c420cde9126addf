#!/usr/bin/env bash
# CI for examples/mcp-ts: an independent MCP client (the official TypeScript
# SDK, @modelcontextprotocol/sdk from npm) drives `processor mcp --dev` over
# stdio against `processor run --dev`, as docs/agents.md tells a newcomer to.
#
#   bash examples/mcp-ts/ci.sh        (from anywhere; needs Go, Node 20+, npm)
#
# The processor it starts is stopped on exit (by PID); a failure prints its
# log and exits non-zero.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/portcullis-mcp-ts.XXXXXX")"
started=$SECONDS
processor_pid=""

cleanup() {
  local status=$? i
  trap - EXIT
  if [ -n "$processor_pid" ] && kill -0 "$processor_pid" 2>/dev/null; then
    kill -TERM "$processor_pid" 2>/dev/null || true
    for i in $(seq 100); do kill -0 "$processor_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$processor_pid" 2>/dev/null || true
  fi
  if [ "$status" -ne 0 ]; then
    echo "mcp-ts/ci.sh: FAILED (exit $status) after $((SECONDS - started))s; processor log (last 40 lines):" >&2
    tail -n 40 "$tmp/processor.log" >&2 2>/dev/null || true
  fi
  rm -rf "$tmp"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

step() { echo "== examples/mcp-ts: $* ($((SECONDS - started))s)"; }
die() {
  echo "mcp-ts/ci.sh: $*" >&2
  exit 1
}

command -v go >/dev/null || die "go not found"
command -v node >/dev/null || die "node not found"
command -v npm >/dev/null || die "npm not found"

step "build the processor"
(cd "$root" && go build -o "$tmp/processor" ./cmd/processor)

step "npm ci ($(node --version), npm $(npm --version))"
(cd "$here" && npm ci --no-audit --no-fund --loglevel=error)

port=$(node -e 'const s = require("node:net").createServer(); s.listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); });')
step "processor run --dev on 127.0.0.1:$port"
"$tmp/processor" run --dev --data "$tmp/dev" --listen "127.0.0.1:$port" --metrics-listen "" >"$tmp/processor.log" 2>&1 &
processor_pid=$!
deadline=$((SECONDS + 60))
until grep -q "Portcullis is running" "$tmp/processor.log" 2>/dev/null; do
  kill -0 "$processor_pid" 2>/dev/null || die "processor run --dev exited"
  [ "$SECONDS" -lt "$deadline" ] || die "processor run --dev did not start within 60s"
  sleep 0.1
done

step "npm test: the TypeScript MCP client drives processor mcp --dev over stdio"
(cd "$here" && PROCESSOR="$tmp/processor" NATS_URL="nats://127.0.0.1:$port" npm test) >"$tmp/npm-test.log" 2>&1 || {
  cat "$tmp/npm-test.log" >&2
  die "npm test failed"
}
grep -E '^# (tests|pass|fail)' "$tmp/npm-test.log"
grep -q '^# fail 0$' "$tmp/npm-test.log" || die "npm test reported failures"
step "done"
