// Package sim is a deterministic simulation of the dispatch fence (issue
// 26, item 2): two or three simulated processors run the real
// dispatch.Step and reconciliation.Step, in shells that mirror
// stages/dispatch and stages/reconciliation's Stage.run (lock, load, step,
// commit, call, step again, reload on a conflict), against a simulated
// shared journal (compare-and-set per fingerprint, held to the kvtest
// conformance suite), a simulated work queue (ack wait, redelivery,
// RetryAfter, give-up after the runner's limits), timers armed before the
// commit and never cancelled (jetstream.Schedules), the held-envelope stream
// and a provider; an operator settles indeterminate effects through the
// real reconciliation.Settle in a shell that mirrors Stage.Resolve (lock,
// load, settle, commit, reload on a conflict; operator.go, resolve.go).
// Everything is driven by one seed (math/rand/v2 PCG): no
// real time (a simulated clock in ms), no goroutines, one event at a time.
//
// Faults the seed injects: a processor crashing before any action of its
// shell (losing its memory, locks and journal sessions; its input is
// redelivered after the ack wait; it restarts with the same instance id)
// — and between dispatch's commit and the publish of what it decided (the
// outcomes, the held envelope: fault.DispatchAfterReceipt), drawn from a
// stream of its own so that the seeds recorded before it replay alike
// until such a crash — a
// processor pausing past its lease (no heartbeat: its input goes to
// another; it resumes where it stopped), a provider reply lost (the call
// times out, the result unknown), a request delayed in the network, a
// provider outage (no responders), and clock skew between every processor
// and the provider within approval.clock_skew; and, from a random stream
// of their own (outcomes.go), a processor's link to the outcome stream
// failing for up to 20s — its outcome publishes unanswered (perhaps
// stored all the same), held and made again, its input given to another
// processor once the ack wait passes — and repeats of a proposal,
// answered from a processor's own outcome log or from the stream by a
// direct get that a replica one message behind may serve, replayed a
// while after they were read. The operator (in two runs
// of three) reads the journal at seeded times, as `processor reconcile
// list` does; finding the latest receipt reconciliation_required it looks
// at the provider — truthful, but possibly stale: it reports what the
// provider had done when it looked — and sends its finding seconds or
// minutes later to a processor, which may crash (no answer: it sends
// again) or pause meanwhile, while polls, redispatches and dispatches go
// on.
//
// The invariants (check.go) an operator's settlement is held to, all
// contract guarantees (SPEC §3 Reconciliation and the operator commands,
// §4's not_after_ms fence, §6 "settle every indeterminate action" on any
// processor): it is the proposal's answer from then on, superseding a
// terminal RECONCILIATION_REQUIRED, and no outcome of another kind
// follows it unless it carries an older receipt (2); it agrees with what
// the provider did (3); the operator's attempt id is on one receipt at
// most, which follows, linked, a reconciliation_required one (6); nothing
// dispatches the intent after it — no request sent under a lease still
// open at the settlement, no held envelope handed back to dispatch (7);
// its outcome reaches every proposal (8). And every proposal's subject,
// as the stream stored it (and so as a host saw it live), keeps SPEC
// §2.4's order (9): each outcome restates or supersedes the one before
// it (schema.Standing.Follows), and the last is the latest truth the
// journal records for the proposal. Not checked: the
// OPERATOR_RESOLVED event, the activity snapshot, the answer to the
// operator's command beyond its refusals.
//
// Real: dispatch.Step, reconciliation.Step and Settle, dispatch.LeaseWait
// and NotInvoked, the record and its transitions (intent.Apply, which
// those steps call), schema.Late.
// Modelled: the operator and its command's transport, the shells (the real ones block in their calls, so they cannot be
// interleaved without goroutines; each action of the model is one of
// theirs, and the crash points are between any two), the journal store,
// JetStream, the scheduler, the provider, the outcome stream (message-id
// dedupe, the expected last subject sequence, only what is stored sent
// live) and the runner's publish of outcomes around the real
// stages.PublishAfter, ReplayLast, OutcomeMsgID and LastOutcomes. Not modelled: disclosure, the
// activity snapshot, the operator API's signing and service, the grant and policy beyond a
// valid grant, the replicated journal's after-writes being repaired by a
// later commit, storage errors and ErrUncertain, the runner's retry counts
// being per process (here per message), JetStream's duplicate window
// (unbounded here), more than one intent per run.
//
// Findings (in the real code; findings 1, 2, 3, 6 and 9–11 are fixed, their
// seeds replayed by TestFindings and TestOrderFindings and the facts of 1 and 3 by
// TestFindingsInStep, of 6 by reconciliation's
// TestReceiptsOrderedAcrossRedispatch; 4 and 5 are closed only for an
// operator who names what was examined, their seeds replayed by
// TestOperatorFindings):
//
// Finding 1 — dispatch.Step applies a not-invoked reply to another
// dispatch's record. A processor pauses past its lease between its
// in-flight record and the send; meanwhile the dispatch is declared
// interrupted, reconciliation finds the request lost and the intent is
// dispatched again by another processor, whose request reaches the
// provider. The paused processor resumes, its request is refused as late
// (by its own check or the connector's), its commit conflicts, it reloads
// and steps again with its reply: Step marks the OTHER processor's
// in-flight record not-invoked, and the next delivery sends the intent
// again — the provider acts twice (seed 5175; 13 of 50,000 seeds without
// the guard, plus 7 that end FAILED_BEFORE_DISPATCH although the provider
// acted). A not-invoked reply proves only that its own lease's request was
// not acted on. Fixed: dispatch.Facts.Lease names the in-flight record a
// call was made under (dispatch.LeaseOf), and Step records a not-invoked
// reply only on that record; over another it writes nothing and waits.
//
// Finding 3 — reconciliation judges an answer of absence by the time
// after it came back. reconciliation.Step believes failed_before_dispatch
// only once f.Now is past the request's not_after_ms plus the clock skew
// (AbsentAfter), but the shell reads f.Now after the reply returns. A
// processor that stalls between the provider's answer and that read (the
// simulation pauses it there) turns an answer given before the fence
// into one believed after it: the request still in the network reaches
// the provider in time and is acted on, the intent is dispatched again,
// and the provider acts twice (seed 55056; 2 of 100,000 seeds with
// finding 1 guarded). The moment that makes an answer trustworthy is when
// the question was asked: the attempt's checkpoint (StartedAtMs, written
// before the call). Fixed: reconciliation.Step judges absence by the
// checkpoint's StartedAtMs (which also covers a slow reply path, found by
// reasoning: an answer that takes longer than approval.clock_skew to come
// back).
//
// Finding 2 — a stale outcome after the terminal one (fixed with finding
// 9). A processor that loaded the record (receipt RECONCILIATION_REQUIRED),
// paused, and resumed after reconciliation confirmed the effect published
// the stale non-terminal outcome after CONFIRMED: Step decided on a
// record that no commit compared (it wrote nothing). The stale outcome
// carries the older receipt (recorded_at_ms earlier than the terminal
// one's), so a client that orders by receipt could tell; a host that
// reads the last outcome could not. SPEC §2.4 now says outcomes follow
// what was recorded (seed 37417 with BugUnorderedPublish).
//
// Findings 4 and 5 (closed when the operator names what was examined) — an operator's finding is
// applied to what holds when it lands. `processor reconcile resolve`
// names the fingerprint only, so Stage.Resolve settles whatever receipt
// is the latest when the command arrives, whenever the operator looked at
// the provider. With a truthful operator who looks, then sends:
//
//   - 4: between the look and the command, reconciliation finds the
//     request lost and dispatches the intent again; the new request is
//     acted on, its dispatch times out, and the operator's absence — true
//     of the first dispatch — settles the second: REJECTED, and the
//     provider acted (seed 1626; 109 of 40,000 seeds; seed 1904 since the crash after a commit shifted the runs).
//   - 5: the operator looks while reconciliation is still polling, before
//     the dispatch's not_after_ms plus the clock skew; the request,
//     delayed in the network, reaches the provider in time and is acted
//     on; the absence is settled anyway (seed 14601, and 39135 sent after
//     the fence; 8 of 40,000 seeds). reconciliation.Step does not believe
//     an absence from the provider before that fence (SPEC §4); Resolve
//     takes one from an operator at any time.
//
// reconciliation.Settle refuses both when told the receipt examined and
// when the provider was observed (SettleFacts.Examined, ObservedAtMs:
// ErrSuperseded, ErrTooEarly); the simulated operator tells it, and with
// it 40,000 seeds hold every invariant (Config.UnboundOperator: it does
// not, as a command that names neither). The operator API's
// reconcile.resolve carries both (receipt_id, observed_at_ms; `processor
// reconcile resolve --receipt --observed-at`), optional for compatibility:
// an operator who names neither is still open to 4 and 5. Judging an
// absence by the command's own arrival instead (refusing --absent before
// the fence) would fix 5 for an operator who checks just before sending,
// but not an earlier check, and it stops the demo's and several tests'
// immediate --absent; it is not done.
//
// Finding 6 — a redispatch's receipt recorded before the one it follows.
// Receipts are recorded at max(now, the previous receipt's + 1), but a
// reopened intent (reconciliation found the request lost) has no previous
// receipt, so the new dispatch's receipt took the clock of its processor
// alone: one behind the processor that recorded the last receipt gives a
// CONFIRMED receipt an earlier recorded_at_ms than the
// RECONCILIATION_REQUIRED before it. A processor paused with that older
// record republishes its outcome after CONFIRMED, and finding 2's rule (a
// stale outcome carries an older receipt) no longer tells it (seed 87377,
// in a 200,000-seed search with the operator). Fixed: kv.Intent.Reopen
// keeps the history's latest recorded_at_ms (ReceiptAfterMs) and the next
// receipt is recorded after it.
//
// Finding 7 — a crash after a commit, before its publish (found once the
// simulation crashed there; the real soak had shown the first half).
// (a) Dispatch kept the envelope for a redispatch only with the receipt
// that made the effect unknown: a processor that crashed between that
// commit and keeping the envelope left reconciliation nothing to send
// again, and a request lost in flight ended its proposal
// FAILED_BEFORE_DISPATCH (TestClusterSoak in CI, soak-0002; reproduced by
// internal/crashtest TestDispatchCrashBeforeKeepingTheEnvelope; planted
// as BugHoldOnce, caught by seed 158). (b) A redispatch's receipt is told
// to every proposal of the intent, but a processor that crashed after
// committing it left the others without an end: the redelivery answered
// only its own proposal (seed 792: 26 of 20,000 seeds). Fixed: every
// delivery that finds such a receipt keeps the envelope again, and tells
// the other proposals again; reconciliation waits for a missing envelope
// (reconciliation.Rules.HeldWait) before letting the finding stand.
//
// Finding 8 — a redispatch denied at the re-check (found once a quarter
// of the runs give the proposals grants that expire within two minutes,
// a random stream of their own). A held envelope sent again after the
// intent's request was found lost met dispatch's re-check with its grant
// expired: the denial ended that proposal only, as any re-check denial
// does, and the intent stayed lost with its other proposals at
// RECONCILIATION_REQUIRED for good (planted back as BugRedispatchEndsOne,
// caught by seed 230). Fixed: dispatch recognizes reconciliation's
// redispatch by its message id (kv.RedispatchID under the processor's
// MsgID) and a denial of it concludes the intent FAILED_BEFORE_DISPATCH
// for every proposal, the reason as an incident event
// (dispatch.TestStepDeniedRedispatch). Seed 39030 then showed that a
// redelivered reconciliation trigger handed the envelope on under another
// message id (its number read from the decision's writes, which a
// redelivery has none of): not deduplicated, and not recognized. Fixed:
// the decision carries the reopening's number (Decision.Redispatches).
// A proposal ended at the re-check while another proposal of its intent
// was dispatched is answered about its own grant (docs/design.md); the
// check holds it to the provider only when its end is not recorded as
// such (deniedAtReCheck).
//
// Finding 9 — outcomes out of order (issue 33, seen on real servers: a
// cluster soak ended with proposals whose last outcome was
// RECONCILIATION_REQUIRED although reconciliation had confirmed the
// effect). Every publisher of an outcome may be stale: a processor whose
// publish of RECONCILIATION_REQUIRED went unanswered retried it after
// another processor published CONFIRMED (seed 18492); one paused with the
// record it loaded (finding 2, seed 37417); a repeat replayed what the
// processor's own log recorded, or what a replica one message behind
// returned (seed 830). With outcomes published as before
// (BugUnorderedPublish: no expected sequence, replays as recorded, the
// log overwritten) about 3 % of the seeds store a stale outcome last.
// Fixed (stages/outcomes.go): each outcome is published with the expected
// last subject sequence the processor knows, dropped when what it knows
// there supersedes it, decided again on the leader's last message when
// the stream refuses it; a replay republishes the subject's latest truth;
// the log keeps the latest; and the stream sends live only what it
// stored (kv/jetstream.OutcomeStream). TestOrderFindings replays the seeds.
//
// Finding 10 — a redelivered input's new answer dropped as a duplicate
// (found once the simulation modelled the stream's message-id dedupe for
// outcomes). An outcome's message id named the input alone, so an input
// redelivered after the record moved on — a proposal whose first delivery
// published RECONCILIATION_REQUIRED, ended at dispatch's re-check on a
// later delivery — published its new answer under the first's id, and
// the stream dropped it for the duplicate window: the proposal never
// heard its end (seed 6714, 6 of 40,000 seeds; BugInputOutcomeID).
// Fixed: stages.OutcomeMsgID names what the outcome says too
// (stages' TestRunnerPublishesARedeliveredInputsNewAnswer).
//
// Finding 11 — two more redispatches denied that ended only their
// proposal (found once link failures shifted the runs; finding 8's
// kind). (a) The held envelope's own proposal had been ended meanwhile by
// its original input, redelivered while the intent was lost: the
// redispatch answered with that end and left the intent lost (seed
// 10165). (b) The redispatch's first attempt reached nobody (not-invoked)
// and the next attempt's re-check found the grant expired: no longer
// "awaited" (the intent was not-invoked, not lost), it ended its
// proposal alone (seed 52819). Either way the intent's other proposals
// waited at RECONCILIATION_REQUIRED for good. Fixed in dispatch.Step:
// both conclude the intent FAILED_BEFORE_DISPATCH
// (TestStepDeniedRedispatch); TestFindings replays both seeds.
//
// The intent's transition tables (kv/intent/testdata) are replayed here
// too (TestIntentTables, transitions.go): every row's transition is held
// to the invariants one transition can break (1, 6, 7, 9), and every row
// the stages reach from facts alone is made through the real
// dispatch.Step, reconciliation.Step or Settle, which must commit the
// record intent.Apply gives, byte for byte.
//
// It imports the stages whose pure steps it drives and the records of
// state; it runs no NATS server, touches no disk and reads no real clock.
package sim
