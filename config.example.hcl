# Portcullis configuration. Every key is shown with its default (or an
# example where there is none) and is optional unless it says "required".
# For a small start with keys of your own: processor init (docs/running.md).
# "SPEC §N" below is section N of PROTOCOL.md, the wire contract.
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
  store_dir   = "data/nats"      # embedded server's JetStream file store (its LOCK keeps a second processor off it)
  sync_always = false            # fsync every JetStream write before its ack (power-loss safe, slower)
  # url         = "nats://n1:4222,nats://n2:4222"  # instead of embedded
  # credentials = "/etc/portcullis/processor.creds" # with url: a .creds file (JWT + seed) or an nkey seed file (SU…)
  replicas    = 1                # replicas of every stream and bucket Portcullis creates (the journal's too), 1–5 (1 with embedded)

  # Every client of the embedded server logs in with the nkey of its host,
  # connector, resolver, source or operator block below, in a NATS account
  # of that block's own, and gets exactly that role's permissions
  # (docs/security.md). false is refused unless listen is a loopback address.
  auth = true

  # TLS for the embedded listener and the processor's own connection
  # (with url: ca_file verifies the servers; cert_file/key_file are then a
  # client certificate). Absent: plain TCP.
  # tls {
  #   cert_file = "/etc/portcullis/nats.pem"
  #   key_file  = "/etc/portcullis/nats-key.pem"
  #   ca_file   = "/etc/portcullis/ca.pem"
  # }
}

# The HMAC key that authenticates every internal hand-off and timer message
# (64 hex digits). Created with mode 0600 at the first start if missing;
# `processor keygen internal --out FILE` makes one ahead of time. Processors
# that share work share its content.
internal {
  # key_file = "data/store/internal.key" # default: <store.dir>/internal.key
}

# Bounds of the JetStream streams. Sizes take B, KB, MB, GB or KiB, MiB, GiB.
# Every byte and every wait the hosts share is budgeted per host: no host's
# traffic can spend what another's needs. processor validate warns, with the
# numbers, where the hosts' budgets together do not fit a shared stream.
streams {
  max_age           = "168h" # every stream; at least 2×approval.ttl
  ingress_max_bytes = "64MiB" # each host's proposals, and its grants, waiting for admission: at the limit that host's publishes are refused, no other host's
  ingress_max_msgs  = 10000   # the same budget in messages
  stage_max_bytes   = "1GiB" # each stage stream (work: a hand-off leaves once its stage is done): when full, hand-offs wait and are published again
  history_max_bytes = "1GiB" # outcomes, incidents and the activity bucket, each: when full, the oldest go

  # Each host's proposals inside the pipeline (admitted, or resumed by a
  # grant, and neither answered nor parked yet): at the bound that host's next
  # proposals and grants wait in its own ingress streams. Every host's, at
  # their largest (admission.max_payload_bytes + 8KiB), must fit
  # stage_max_bytes: 1000 × 72KiB × 14 hosts does.
  host_pipeline_max_msgs = 1000
  # Each host's envelopes of proposals waiting for approval, in a stream of
  # its own: a proposal that would park past it is refused at once
  # (DENIED/APPROVALS_PENDING_EXCEEDED).
  host_parked_max_bytes = "64MiB"
  # Each host's envelopes of dispatches whose effect is unknown (kept so that
  # a request found lost in flight can be sent again), in a stream of its
  # own: past it none is kept, and such a request ends FAILED_BEFORE_DISPATCH.
  host_held_max_bytes = "64MiB"
  # Each host's share of ACTIONS_OUTCOMES, of ACTIONS_INCIDENTS and of the
  # activity bucket, each: past it that host's oldest go, never another's.
  # (hosts + 1) shares must fit history_max_bytes (the one more: events of
  # input that names no configured host).
  host_history_max_bytes = "64MiB"
  host_history_max_msgs  = 100000 # each host's outcomes kept, in messages
  # Incident events each host may cause per second, of each phase and code,
  # after a burst of ten seconds' worth; the rest are counted in
  # actions_incidents_suppressed_total, not published.
  host_incident_rate = 100
}

# The local Pebble store: grounding checkpoints, a copy of outcomes, and
# with a local journal delivery dedupe, parked approvals, in-flight records,
# receipts, reconciliation attempts and timers. Never holds payloads or
# protected values.
store {
  dir = "data/store"

  # Where the dispatch journal lives: the record per intent fingerprint that
  # makes dispatch exactly-once, its receipts and reconciliation attempts.
  #   "local"      in dir, timers fired by this processor: one processor
  #                only. Another processor on the same NATS and prefix would
  #                not see it and could dispatch the same intent again.
  #   "replicated" in the JetStream KV bucket <prefix>_journal (nats.replicas
  #                replicas, reads from the stream leader), every write a
  #                compare-and-set per fingerprint; reconciliation polls are
  #                nats-server message schedules in the reconciliation
  #                stream. Any number of processors may share it, each with
  #                its own dir and the same config and internal.key_file;
  #                losing a processor with its dir, or one NATS server of
  #                three, loses and repeats nothing (SPEC §6). Needs url.
  #                Approvals, the admission records (proposal ids and
  #                delivery ids taken, value-free) and operator request
  #                nonces are then shared too, in the buckets
  #                <prefix>_approvals, <prefix>_admission and
  #                <prefix>_nonces, and approval expiries are message
  #                schedules: any processor resumes a parked proposal, and a
  #                reused id, a repeated delivery or a replayed operator
  #                request is refused by any processor.
  #   "auto"       replicated with url, local with the embedded server.
  # A processor whose dir holds a local journal or locally parked approvals
  # refuses to start on a replicated one (it would not know the intents
  # dispatched or the proposals parked so far): a processor that ran with
  # url before keeps journal = "local".
  journal = "auto"
}

# Prometheus /metrics. "" disables the endpoint.
metrics {
  listen = "127.0.0.1:9464"
}

subjects {
  prefix = "actions" # every subject, stream and bucket name derives from it
}

admission {
  allow_unsigned    = false # development only: admit unsigned proposals and grants, answer unsigned operator requests (logged loudly)
  max_payload_bytes = 65536 # largest proposal or grant body, at most 1048576
}

# Who may connect (SPEC §2.8). Each role logs in to NATS with its own nkey
# (`processor keygen <role> --out FILE` prints the public key to paste
# here; the seed stays with the role). Block names are unique across the
# five kinds, and so are keys.

# A host publishes proposals on actions.proposals.<name> and grants and
# declines on actions.grants.<name>, signing each body with the same key
# (headers Actions-Host-Key, Actions-Signature), and reads
# actions.outcomes.<name>.>. It may speak only for the tenants listed.
host "frontdesk" {
  public_key = "UC4NNP2HJXGCFDPHCNA3GXL2ZAGKEXMMYXZLZ5GIRNOQUYGNFGIT3W7A" # required
  tenants    = ["tenant:demo"]                                            # required: tenant_ref values, each with a tenant block
}

# A tenant and the security domains its proposals may name
# (context.tenant.security_domain_ref). Required for every tenant a host lists.
tenant "tenant:demo" {
  security_domains = ["security-domain:demo"] # required
}

# A provider connector serves actions.provider.<p>.dispatch and .reconcile
# for its providers, and nothing else. Each provider has at most one
# connector block (each block is its own NATS account, and the processor's
# account imports every provider's requests from exactly one): for
# availability run several connector processes with the block's key,
# subscribed in one NATS queue group.
connector "inventory-connector" {
  public_key = "UAVZZYXS64PVNLBL243J5AN56G3KKUL37W7NZWCSNI6QKZ5W6UHMICKU" # required
  providers  = ["inventory"]                                              # required: configured providers
}

# The host's protected-profile resolver serves actions.disclosure.resolve.
# At most one resolver block (several processes may share its key, in one
# NATS queue group).
resolver "profiles" {
  public_key = "UCQG6AQW3D6YFUSEYK7BPUF75WQ3NALL7RFHHQTZE54LLRQ3H4SQOOIP" # required
}

# A candidate source serves actions.candidates.<name> (the proposal's
# grounding.candidate_source).
source "catalog" {
  public_key = "UAYT7FA2LV7WLSIV2G7KWCDPCPEJ2UHTRAVNDUFEWZ5FGZB3QFXF4PQH" # required
}

# An operator sends signed requests to actions.admin.> (`processor reconcile
# resolve --nkey FILE`) and reads outcomes, incidents and the activity bucket.
# A resolution's receipt and activity record name the operator ("oncall").
operator "oncall" {
  public_key = "UANVAYWJPXI6YLI4GPEWY4UYC6TLQNNRDNI5Q3F5KC3INJPCT3QGHYAU" # required
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
  max_in_flight     = 16     # concurrent dispatches to this provider; others' proposals never wait for it
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
  max_candidates       = 32   # more candidates: GROUNDING_CANDIDATES_UNBOUNDED (at most 1024)
  source_timeout       = "2s" # candidate source request (actions.candidates.<name>)
  source_max_in_flight = 16   # concurrent requests to each candidate source; others' proposals never wait for it
}

approval {
  ttl                = "10m" # a parked proposal without a grant ends DENIED / APPROVAL_TIMED_OUT
  clock_skew         = "30s" # a grant's issued_at_ms may lie this far in the future (host clocks drift)
  max_grant_lifetime = "24h" # a longer expires_at_ms − issued_at_ms: GRANT_LIFETIME_EXCEEDED
}

reconciliation {
  interval     = "5s" # first poll after this; later polls double, up to 32× interval
  max_attempts = 10   # then RECONCILE_EXHAUSTED for an operator
}

# How long the processor's own store keeps records after their last change;
# a background sweep removes the rest every sweep_interval. Unset horizons
# follow the settings above (shown: their values with these defaults).
retention {
  # Delivery and admission records, last outcomes, approval decisions,
  # dispatch-time denials, grounding checkpoints. Default streams.max_age + 24h;
  # at least streams.max_age (a message still in its stream must be recognized).
  proposals = "192h"
  # Finished intent journals, their receipts and reconciliation attempts: a
  # repeat of the intent is answered with its receipt for this long. Default
  # the longer of 30 days and the least allowed: streams.max_age and
  # approval.max_grant_lifetime + clock_skew. Journals still polling or waiting
  # for an operator are kept whatever their age.
  receipts       = "720h"
  sweep_interval = "1m"
}

# `processor mcp --config FILE --nkey HOST_SEED` (PROTOCOL.md §7): an MCP
# server for agents that is the host named here. It logs in and signs with
# that host's key (--nkey; the public key of its host block) and reads only
# its outcomes. Every proposal it sends carries the context below, never
# anything a model says. A model's tool call gives only `target` (the
# user's words for the target; not for a tool with a fixed referent),
# `payload` (checked against payload_schema) and, after a clarification,
# the `choice` the user picked with that clarification's token. A
# clarification and an approval are asked of the user by MCP elicitation;
# no tool approves.
mcp {
  host                = "frontdesk"           # required: a host block
  tenant_ref          = "tenant:demo"         # required: one of the host's tenants
  security_domain_ref = "security-domain:demo" # required: one of the tenant's domains
  actor_ref           = "actor:demo"          # required: who the user is to Portcullis (grants' authorized_by)
  actor_assurance     = "mcp-session"         # context.actor.assurance
  scope_ref           = "policy-scope:mcp"    # context.authorization.scope_ref
  policy_revision     = "policy:mcp"          # context.authorization.policy_revision
  approver_assurance  = "session"             # a grant's authentication_assurance when the user approves by elicitation
  grant_lifetime      = "5m"                  # that grant's validity
  wait                = "1m0s"                # one call follows its proposal this long, then answers "pending"

  # One tool per action. The model sees its name, description and an input
  # schema built from payload_schema.
  tool "adjust_stock" {
    description = "Adjust the stock count of one lumber item by a quantity (negative: remove)." # required: written for a model
    provider    = "inventory"        # required: a provider block
    capability  = "inventory.adjust" # required
    operation   = "adjust_stock"     # required
    environment = "test"             # required: mock, test or live
    account_ref = "inventory:demo"   # required: context.provider.account_ref
    approval    = "user"             # "user": ask the user by elicitation; "policy": this file's standing approval (a grant with method policy; managed policies may forbid it)
    # The target is grounded in exactly one way: candidate blocks (the host's
    # own list; a clarification shows their summaries), candidate_source (the
    # processor asks that source; a clarification cannot list candidates), or
    # referent (a fixed target; the model names none).
    # candidate_source = "catalog"
    # referent         = "svc:payments-prod"
    candidate "sku-1001" {
      resource = "Lumber: Cedar-8ft-GradeA"   # required: attributes.resource, what the target must match
      summary  = "Cedar board, 8 ft, grade A" # required: unique; what the user chooses by, and what every approval question names
      aliases  = ["cedar grade A", "cedar grade A boards"] # other words users say for it: each grounds to this record (exact match once normalized); a word two records share asks which
    }
    candidate "sku-1002" {
      resource = "Lumber: Cedar-8ft-GradeB"
      summary  = "Cedar board, 8 ft, grade B"
    }
    # required: JSON Schema (2020-12) of intent.payload, an object
    payload_schema = <<-EOT
      {"type": "object",
       "properties": {"quantity": {"type": "integer", "minimum": -1000, "maximum": 1000}},
       "required": ["quantity"], "additionalProperties": false}
    EOT
    summary        = "Adjust stock" # required: starts display.summary, "Adjust stock: <target> — quantity: 20"
    summary_fields = ["quantity"]   # payload members appended to it
  }
}
