#!/usr/bin/env bash
# CI for examples/: builds the processor and drives it with the TypeScript
# host and connector, as examples/ts/README.md tells a newcomer to.
#
#   bash examples/ts/ci.sh        (from anywhere; needs Go, Node 20+, npm)
#
# 1. `processor run --dev`: the fingerprint vectors (npm test), then approve
#    (CONFIRMED, the connector called once), the same intent again (the
#    same receipt with recorded_earlier, the connector not called), a dispatch request sent after
#    its not_after_ms (refused NOT_AFTER_PASSED, not applied) and one
#    without it (rejected), a decline (DENIED, nothing dispatched), --last.
# 2. `processor run --config` with a host and a connector block and NATS
#    authentication on: the same host and connector with their nkeys (login,
#    inbox prefix, signed bodies, direct get under a host's permissions);
#    an anonymous client, a host or connector with another role's key and
#    an http:// URL are each refused at once, saying what to pass.
#
# Every process it starts is stopped on exit (by PID); a failure prints the
# logs and exits non-zero.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/portcullis-examples-ts.XXXXXX")"
started=$SECONDS
pids=()
logs=()

# stop_pid PID: SIGTERM, then SIGKILL after 10 s; forgets the PID so that
# it is never signalled again.
stop_pid() {
  local pid=$1 i rest=()
  for i in "${pids[@]}"; do [ "$i" = "$pid" ] || rest+=("$i"); done
  pids=("${rest[@]}")
  kill -TERM "$pid" 2>/dev/null || return 0
  for i in $(seq 100); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  echo "ci.sh: PID $pid still running after 10s; killing it" >&2
  kill -KILL "$pid" 2>/dev/null || true
}

cleanup() {
  local status=$? pid f
  trap - EXIT
  for pid in "${pids[@]}"; do stop_pid "$pid"; done
  if [ "$status" -ne 0 ]; then
    echo "ci.sh: FAILED (exit $status) after $((SECONDS - started))s; logs:" >&2
    for f in "${logs[@]}"; do
      [ -f "$f" ] || continue
      echo "----- $(basename "$f") (last 40 lines)" >&2
      tail -n 40 "$f" >&2
    done
  fi
  rm -rf "$tmp"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

step() { echo "== examples/ts: $* ($((SECONDS - started))s)"; }
die() {
  echo "ci.sh: $*" >&2
  exit 1
}

# wait_for FILE PATTERN PID SECONDS: until FILE has a line matching PATTERN;
# fails if PID exits first or time runs out.
wait_for() {
  local file=$1 pattern=$2 pid=$3 limit=$4 deadline=$((SECONDS + $4))
  until grep -q -- "$pattern" "$file" 2>/dev/null; do
    kill -0 "$pid" 2>/dev/null || die "$(basename "$file"): the process exited before printing \"$pattern\""
    [ "$SECONDS" -lt "$deadline" ] || die "$(basename "$file"): no \"$pattern\" within ${limit}s"
    sleep 0.1
  done
}

free_port() {
  node -e 'const s = require("node:net").createServer(); s.listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); });'
}

# host NAME ARGS...: runs the example host (60 s at most), output to the
# terminal and to $tmp/NAME.log; returns its exit status.
host() {
  local name=$1
  shift
  logs+=("$tmp/$name.log")
  (cd "$here" && timeout 60 node --import tsx host.ts "$@") 2>&1 | tee "$tmp/$name.log"
}

# dispatches: how many dispatches the running connector has carried out.
dispatches() { grep -c -- '-> confirmed inv-' "$connector_log" || true; }

# receipt LOG: the receipt id of the CONFIRMED outcome in a host's log.
receipt() { sed -n 's/^outcome: CONFIRMED.*receipt \(rcpt_[0-9a-f]*\).*/\1/p' "$1" | tail -n 1; }

# start_connector NAME: starts the example connector, logging to $tmp/NAME.log.
start_connector() {
  connector_log="$tmp/$1.log"
  logs+=("$connector_log")
  : >"$connector_log"
  (cd "$here" && exec node --import tsx connector.ts) >>"$connector_log" 2>&1 &
  connector_pid=$!
  pids+=("$connector_pid")
  wait_for "$connector_log" "connector ready" "$connector_pid" 30
}

command -v go >/dev/null || die "go not found"
command -v node >/dev/null || die "node not found"
command -v npm >/dev/null || die "npm not found"

step "build the processor"
(cd "$root" && go build -o "$tmp/processor" ./cmd/processor)

step "npm ci ($(node --version), npm $(npm --version))"
(cd "$here" && npm ci --no-audit --no-fund --loglevel=error)

step "npm test: fingerprint v2 against fingerprint/testdata"
(cd "$here" && npm test) >"$tmp/npm-test.log" 2>&1 || {
  logs+=("$tmp/npm-test.log")
  die "npm test failed"
}
grep -E '^# (tests|pass|fail)' "$tmp/npm-test.log"
grep -q '^# fail 0$' "$tmp/npm-test.log" || die "npm test reported failures"

# ---------------------------------------------------------------- run --dev
port=$(free_port)
export NATS_URL="nats://127.0.0.1:$port"
step "processor run --dev on 127.0.0.1:$port"
logs+=("$tmp/processor-dev.out" "$tmp/processor-dev.err")
"$tmp/processor" run --dev --data "$tmp/dev" --listen "127.0.0.1:$port" --metrics-listen "" \
  >"$tmp/processor-dev.out" 2>"$tmp/processor-dev.err" &
processor_pid=$!
pids+=("$processor_pid")
wait_for "$tmp/processor-dev.out" "Portcullis is running" "$processor_pid" 60

step "connector"
start_connector connector-dev

step "host: propose, approve -> CONFIRMED"
id1="ci-$(date +%s)-$RANDOM"
host confirm --id "$id1" || die "host (approve) failed"
grep -q '^done: CONFIRMED$' "$tmp/confirm.log" || die "host (approve): no CONFIRMED"
grep -q 'sending UNSIGNED' "$tmp/confirm.log" || die "host: does not say that it sends unsigned messages"
[ "$(dispatches)" = 1 ] || die "connector: want 1 dispatch, have $(dispatches)"
rcpt=$(receipt "$tmp/confirm.log")
[ -n "$rcpt" ] || die "host (approve): no receipt id"

step "host: the same intent again -> the same receipt, the connector not called"
host repeat || die "host (repeat) failed"
[ "$(receipt "$tmp/repeat.log")" = "$rcpt" ] || die "repeat: receipt $(receipt "$tmp/repeat.log"), want $rcpt"
grep -q 'recorded earlier' "$tmp/repeat.log" || die "repeat: the outcome does not say recorded_earlier"
! grep -q 'recorded earlier' "$tmp/confirm.log" || die "confirm: the first proposal's own outcome says recorded_earlier"
[ "$(dispatches)" = 1 ] || die "connector: want 1 dispatch after the repeat, have $(dispatches)"

step "connector: a dispatch after its not_after_ms is refused and not applied; one without it is rejected"
# late_request NOT_AFTER_MS: sends the connector a dispatch request of a
# fresh intent (not_after_ms as given, "" for none) and prints its reply.
late_request() {
  (cd "$here" && node --input-type=module -e '
import { connect } from "@nats-io/transport-node";
const key = "7a".repeat(32);
const req = { schema: "actions.dispatch.v1", fingerprint: `sha256:${key}`, idempotency_key: key, provider: "inventory",
  capability: "inventory.adjust", operation: "adjust_stock", environment: "test", referent: "sku-late",
  payload: { quantity: 1 }, external_spend: null, protected_disclosure: null };
const arg = process.argv[1];
if (arg !== "") req.not_after_ms = Number(arg);
const nc = await connect({ servers: process.env.NATS_URL });
const m = await nc.request("actions.provider.inventory.dispatch", JSON.stringify(req), { timeout: 5000 });
console.log(m.string());
await nc.close();
' "$1")
}
late=$(late_request "$(($(date +%s%3N) - 1000))")
[ "$late" = '{"outcome":"failed_before_dispatch","error_code":"NOT_AFTER_PASSED"}' ] || die "late dispatch: reply $late"
wait_for "$connector_log" "LATE by" "$connector_pid" 10
missing=$(late_request "")
[ "$missing" = '{"outcome":"rejected","error_code":"inventory.malformed_request"}' ] || die "dispatch without not_after_ms: reply $missing"
[ "$(dispatches)" = 1 ] || die "connector: want 1 dispatch after the late request, have $(dispatches)"

step "host --decline -> DENIED/APPROVAL_DECLINED, nothing dispatched"
host decline --decline --new-intent || die "host --decline failed"
grep -q 'outcome: DENIED.*authorization/APPROVAL_DECLINED' "$tmp/decline.log" || die "host --decline: no DENIED/APPROVAL_DECLINED"
[ "$(dispatches)" = 1 ] || die "connector: want 1 dispatch after the decline, have $(dispatches)"

step "host --last: the stored outcome, by direct get"
host last --last "$id1" || die "host --last failed"
grep -q "^  CONFIRMED (PRESENT, terminal).*$rcpt" "$tmp/last.log" || die "host --last: not the CONFIRMED outcome"
if host last-unknown --last "ci-no-such-proposal"; then die "host --last of an unknown proposal exited 0"; fi
grep -q '^no outcome stored' "$tmp/last-unknown.log" || die "host --last (unknown): no 'no outcome stored'"

if grep -q 'REPEATED' "$connector_log"; then die "connector: an idempotency key repeated"; fi
step "stop run --dev"
stop_pid "$connector_pid"
stop_pid "$processor_pid"

# ------------------------------------------- run --config: nkeys, signatures
step "processor run --config with NATS authentication, a host and a connector"
host_key=$("$tmp/processor" keygen host --out "$tmp/host.nk" 2>/dev/null)
connector_key=$("$tmp/processor" keygen connector --out "$tmp/connector.nk" 2>/dev/null)
port=$(free_port)
export NATS_URL="nats://127.0.0.1:$port"
cat >"$tmp/portcullis.hcl" <<EOF
nats {
  listen    = "127.0.0.1:$port"
  store_dir = "$tmp/signed/nats"
}
store {
  dir = "$tmp/signed/store"
}
metrics {
  listen = ""
}
host "demo-host" {
  public_key = "$host_key"
  tenants    = ["tenant:demo"]
}
tenant "tenant:demo" {
  security_domains = ["security-domain:demo"]
}
connector "inventory-connector" {
  public_key = "$connector_key"
  providers  = ["inventory"]
}
provider "inventory" {
  adapter = "nats"
}
EOF
"$tmp/processor" validate --config "$tmp/portcullis.hcl" >/dev/null
logs+=("$tmp/processor-signed.out" "$tmp/processor-signed.err")
"$tmp/processor" run --config "$tmp/portcullis.hcl" >"$tmp/processor-signed.out" 2>"$tmp/processor-signed.err" &
processor_pid=$!
pids+=("$processor_pid")
wait_for "$tmp/processor-signed.err" '"processor started"' "$processor_pid" 60

step "connector with its nkey"
PORTCULLIS_CONNECTOR_SEED_FILE="$tmp/connector.nk" start_connector connector-signed
grep -q "logged in as $connector_key" "$connector_log" || die "connector: not logged in with its key"

step "host with its nkey: signed proposal and grant -> CONFIRMED"
id2="ci-signed-$(date +%s)-$RANDOM"
PORTCULLIS_HOST_SEED_FILE="$tmp/host.nk" host signed --id "$id2" || die "host (signed) failed"
grep -q "signing every body with $host_key" "$tmp/signed.log" || die "host (signed): did not sign"
grep -q '^done: CONFIRMED$' "$tmp/signed.log" || die "host (signed): no CONFIRMED"
[ "$(dispatches)" = 1 ] || die "connector (signed): want 1 dispatch, have $(dispatches)"

step "host with its nkey: --last (a host's direct get)"
PORTCULLIS_HOST_SEED_FILE="$tmp/host.nk" host signed-last --last "$id2" || die "host --last (signed) failed"
grep -q '^  CONFIRMED (PRESENT, terminal)' "$tmp/signed-last.log" || die "host --last (signed): not CONFIRMED"

# refused NAME SECONDS PATTERN COMMAND...: COMMAND fails, at once (within
# SECONDS, well under the host's 45 s wait for an outcome), printing PATTERN.
refused() {
  local name=$1 limit=$2 pattern=$3 begin=$SECONDS
  shift 3
  logs+=("$tmp/$name.log")
  if (cd "$here" && timeout 60 "$@") >"$tmp/$name.log" 2>&1; then die "$name: exited 0"; fi
  cat "$tmp/$name.log"
  grep -q -- "$pattern" "$tmp/$name.log" || die "$name: no \"$pattern\""
  [ $((SECONDS - begin)) -le "$limit" ] || die "$name: took $((SECONDS - begin))s, want at most ${limit}s"
  echo "($name: refused after $((SECONDS - begin))s)"
}

step "an anonymous host is refused, and told to pass --nkey"
refused anonymous 15 'refused an anonymous login.*pass --nkey FILE' node --import tsx host.ts --timeout 5

step "a host logged in with the connector's key is refused at once"
refused host-wrong-key 15 "may not act as host demo-host: is it the public_key of the host \"demo-host\" block" \
  node --import tsx host.ts --nkey "$tmp/connector.nk"

step "a connector logged in with the host's key is refused at once"
refused connector-wrong-key 15 "may not serve provider inventory" node --import tsx connector.ts --nkey "$tmp/host.nk"

step "an http:// NATS_URL is refused at once"
NATS_URL="http://127.0.0.1:$port" refused host-http 15 "is not a NATS server URL" node --import tsx host.ts --nkey "$tmp/host.nk"

step "done"
echo "examples/ts: 13 passed, 0 failed"
