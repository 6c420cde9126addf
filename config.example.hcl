# Portcullis configuration. Every key is shown with its default (or an
# example where there is none) and is optional unless it says "required".
# Unknown keys and bad values are refused with file:line:
#
#   processor validate --config config.example.hcl
#
# Durations are Go durations: "500ms", "2s", "10m", "1h".

# Where JetStream lives: an embedded nats-server (default) or an existing
# server or cluster (url). Exactly one of the two.
nats {
  embedded    = true             # run nats-server with JetStream in this process
  listen      = "127.0.0.1:4222" # embedded server's client address
  store_dir   = "data/nats"      # embedded server's JetStream file store
  sync_always = false            # fsync every JetStream write before its ack (power-loss safe, slower)
  # url         = "nats://n1:4222,nats://n2:4222"  # instead of embedded
  # credentials = "/etc/portcullis/processor.creds" # NATS .creds file for url
  replicas    = 1                # stream and bucket replicas, 1–5 (1 with embedded)
}

# The local Pebble store: in-flight records, receipts, delivery dedupe,
# parked approvals, reconciliation attempts, timers. Never holds payloads or
# protected values.
store {
  dir = "data/store"
}

# Prometheus /metrics. "" disables the endpoint.
metrics {
  listen = "127.0.0.1:9464"
}

subjects {
  prefix = "actions" # every subject, stream and bucket name derives from it
}

admission {
  allow_unsigned    = false # development only: admit unsigned proposals and grants (logged loudly)
  max_payload_bytes = 65536 # largest proposal or grant body, at most 1048576
}

# A host that publishes proposals and grants. Its ed25519 public key in NATS
# nkey form signs each body (headers Actions-Host-Key, Actions-Signature);
# it may only speak for the tenants listed. Any number of host blocks.
host "frontdesk" {
  public_key = "UC4NNP2HJXGCFDPHCNA3GXL2ZAGKEXMMYXZLZ5GIRNOQUYGNFGIT3W7A" # required
  tenants    = ["tenant:demo"]                                            # required: tenant_ref values
}

# An organization's restriction layer (seed 003). Every block whose
# security_domains match a proposal (or that lists none) applies, in this
# order: disabled, automatic approval forbidden, live forbidden, provider /
# capability / environment allow-lists, minimum assurance, spend ceilings.
# A managed policy never grants. An absent key restricts nothing.
managed_policy "org" {
  security_domains                 = ["security-domain:demo"] # absent: every domain
  disabled                         = false                    # refuse every action
  automatic_approval_forbidden     = true                     # refuse grants by policy, adversarial_auto, managed_policy
  live_actions_forbidden           = true                     # refuse environment "live"
  allowed_providers                = ["inventory", "demo"]    # absent: any
  allowed_capabilities             = ["inventory.adjust"]     # absent: any
  allowed_environments             = ["mock", "test"]         # absent: any
  minimum_authentication_assurance = "session"                # none < session < biometric < managed
  max_external_spend               = { USD = 50000 }          # minor units; a currency not listed is refused
}

# A provider and its adapter. The proposal's intent.provider must name one.
provider "inventory" {
  adapter           = "nats" # nats (request-reply on actions.provider.<name>.dispatch|reconcile), http or fake
  timeout           = "10s"  # one dispatch or reconcile call
  unavailable_retry = "30s"  # keep retrying a dispatch nobody received ("no responders") this long
  # base_url        = "https://connector.internal/inventory" # http adapter: POST <base_url>/dispatch|reconcile
}

# The fake adapter answers from a script: successive calls take successive
# outcomes, the last one repeats.
provider "demo" {
  adapter = "fake"
  script {
    dispatch  = ["confirmed"] # confirmed, acknowledged, rejected, failed_before_dispatch, indeterminate
    reconcile = ["confirmed"] # confirmed, rejected, failed_before_dispatch, indeterminate
  }
}

grounding {
  max_candidates = 32   # more candidates: GROUNDING_CANDIDATES_UNBOUNDED (at most 1024)
  source_timeout = "2s" # candidate source request (actions.candidates.<name>)
}

approval {
  ttl = "10m" # a parked proposal without a grant ends DENIED / APPROVAL_TIMED_OUT
}

reconciliation {
  interval     = "5s" # first poll after this; later polls double, up to 32× interval
  max_attempts = 10   # then RECONCILE_EXHAUSTED for an operator
}
