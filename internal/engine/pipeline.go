package engine

import (
	"fmt"
	"log/slog"
	"regexp"
	"slices"

	"github.com/portcullis/portcullis/kv"

	kvjs "github.com/portcullis/portcullis/kv/jetstream"
	"github.com/portcullis/portcullis/kv/pebble"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/internal/adapters"
	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/seal"
	"github.com/portcullis/portcullis/metrics"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/schema/trust"
	"github.com/portcullis/portcullis/stages"
	"github.com/portcullis/portcullis/stages/admission"
	"github.com/portcullis/portcullis/stages/authorization"
	"github.com/portcullis/portcullis/stages/dispatch"
	"github.com/portcullis/portcullis/stages/grounding"
	"github.com/portcullis/portcullis/stages/policy"
	"github.com/portcullis/portcullis/stages/reconciliation"
	"github.com/portcullis/portcullis/subjects"
)

// Ingress names a host-facing stream a stage consumes.
type Ingress int

const (
	// Internal: the stage consumes its own stream, `<prefix>.stage.<name>.>`
	// (hand-offs and timers), and every input must carry the processor's
	// seal.
	Internal Ingress = iota
	// Proposals: the hosts' proposals (ACTIONS_PROPOSALS).
	Proposals
	// Grants: the hosts' standalone grants and declines (ACTIONS_GRANTS).
	Grants
)

// Spec declares one stage of the pipeline. The table (Pipeline) is the only
// place the stages are listed: wiring, stream creation, metric
// pre-creation, readiness and testenv's Quiesce all read it (through
// Consumers and StreamConfigs), a stage learns its successor from the
// stages.Route it is built with, and its phase is its line's.
type Spec struct {
	// Name is the stage's name: its durable consumer, its stream's and
	// subjects' token (internal stages), and its `stage` metric label.
	Name string
	// Ingress is what the stage consumes (Internal: its own stream).
	Ingress Ingress
	// Phase is the stage's phase (SPEC §2.5). An internal stage's runner
	// reports in it the INTERNAL_MESSAGE_REJECTED event of an unsealed
	// input and the PROCESSING_FAILED event of an input it abandons, so
	// the pipeline check requires rows for both codes there.
	Phase schema.Phase
	// Codes are Phase's rows when Phase is not one of the closed phases
	// (schema.Phases): the documented way a stage that is not Portcullis's
	// own — a test's — gets a phase of its own. The closed sets do not
	// change: such a stage's incident events are not valid wire messages,
	// so it must not emit any in production. A stage of the product gets
	// its phase and codes in the code table instead
	// (schema/internal/gencodes/table.go; `go generate ./schema/...`),
	// which also puts them in the JSON Schemas and the metrics.
	Codes []schema.CodeInfo
	// MaxInFlight bounds the messages the stage handles at once
	// (stages.RunnerConfig's default when 0). Waiting on outside capacity
	// — a provider, a candidate source — is bounded per provider or
	// source by the stage's bulkheads, not by this.
	MaxInFlight int
	// Next is the successor's name ("" for none).
	Next string
	// Scheduled: durable timers fire on this stage — the journal's (its
	// predecessor's Route.NextTimer, its own Route.Timer) or the approval
	// expiries (authorization's own Route.Timer); with a replicated
	// journal they are nats-server message schedules (kv/jetstream's Schedules),
	// which its stream then holds.
	Scheduled bool
	// TimersOnly: nothing is handed on to the stage but timers (its
	// predecessor's Route.NextTimer): it has only its timers stream.
	TimersOnly bool
	// Parks: the stage parks proposals for approval and keeps each one's
	// envelope in the parked stream (subjects.ParkedStream) until it is
	// decided.
	Parks bool
	// Holds: the stage keeps the envelope of each dispatch whose effect is
	// unknown in the held stream (subjects.HeldStream) until
	// reconciliation knows.
	Holds bool
	// New builds the stage's handler.
	New func(parts *Parts, route stages.Route) (stages.Handler, error)
}

// Pipeline is Portcullis's pipeline (SPEC §3): admission → grounding →
// authorization → dispatch → reconciliation, with the grants consumer
// resuming parked proposals into dispatch. It returns a fresh slice.
func Pipeline() []Spec {
	return []Spec{
		{Name: subjects.StageAdmission, Ingress: Proposals, Phase: schema.PhaseAdmission, Next: subjects.StageGrounding, New: newAdmission},
		{Name: subjects.StageGrounding, Phase: schema.PhaseGrounding, Next: subjects.StageAuthorization, New: newGrounding},
		{Name: subjects.StageAuthorization, Phase: schema.PhaseAuthorization, Next: subjects.StageDispatch, Scheduled: true, Parks: true, New: newAuthorization},
		{Name: subjects.StageGrants, Ingress: Grants, Phase: schema.PhaseAuthorization, Next: subjects.StageDispatch, New: newGrants},
		{Name: subjects.StageDispatch, Phase: schema.PhaseDispatch, Next: subjects.StageReconciliation, Holds: true, New: newDispatch},
		{Name: subjects.StageReconciliation, Phase: schema.PhaseReconciliation, Scheduled: true, TimersOnly: true, New: newReconciliation},
	}
}

// InsertBefore returns p with s inserted before the stage named before:
// every stage that handed on to before hands on to s, and s hands on to
// before.
func InsertBefore(p []Spec, before string, s Spec) []Spec {
	out := slices.Clone(p)
	at := len(out)
	for i := range out {
		if out[i].Next == before {
			out[i].Next = s.Name
		}
		if out[i].Name == before && at == len(out) {
			at = i
		}
	}
	s.Next = before
	return slices.Insert(out, at, s)
}

// stageName is what a stage name may be: a subject token, a stream name
// when upper-cased, a metric label value.
var stageName = regexp.MustCompile(`^[a-z][a-z0-9_]{0,31}$`)

// checkPipeline refuses a table the processor cannot run.
func checkPipeline(p []Spec) error {
	names := map[string]bool{}
	for _, s := range p {
		if !stageName.MatchString(s.Name) || names[s.Name] {
			return fmt.Errorf("engine: pipeline: stage name %q is not unique, or not a lowercase letter then up to 31 of a-z 0-9 _", s.Name)
		}
		if s.New == nil {
			return fmt.Errorf("engine: pipeline: stage %s has no constructor", s.Name)
		}
		if err := checkPhase(s); err != nil {
			return err
		}
		if s.Ingress != Internal && (s.Scheduled || s.TimersOnly || s.Parks || s.Holds) {
			return fmt.Errorf("engine: pipeline: stage %s reads a host-facing stream: it can have no timers, parked or held envelopes", s.Name)
		}
		if (s.TimersOnly || s.Parks) && !s.Scheduled {
			return fmt.Errorf("engine: pipeline: stage %s is not Scheduled: it can have no timers stream, and what it parks would never expire", s.Name)
		}
		names[s.Name] = true
	}
	next := map[string]string{}
	for _, s := range p {
		if s.Next != "" && !names[s.Next] {
			return fmt.Errorf("engine: pipeline: stage %s hands on to unknown stage %q", s.Name, s.Next)
		}
		next[s.Name] = s.Next
	}
	// The grants consumer decides with the authorization stage, which
	// hands both consumers' permits on along its own route.
	if a, ok := next[subjects.StageAuthorization]; ok && names[subjects.StageGrants] && next[subjects.StageGrants] != a {
		return fmt.Errorf("engine: pipeline: %s must hand on to %s's successor %q", subjects.StageGrants, subjects.StageAuthorization, a)
	}
	return nil
}

// runnerCodes are the codes a stage's runner reports in its phase itself
// (stages.Runner: an unsealed input, an input it abandons), which an
// internal stage's phase must therefore have.
var runnerCodes = []schema.Code{schema.CodeProcessingFailed, schema.CodeInternalMessageRejected}

// checkPhase refuses a stage without a phase, a phase that is neither
// closed nor given its rows in Codes, rows that reopen a closed phase or
// belong to another, and an internal stage whose phase lacks a code its
// runner reports (which would otherwise panic in schema.NewIncident at
// the first unsealed input).
func checkPhase(s Spec) error {
	if s.Phase == "" {
		return fmt.Errorf("engine: pipeline: stage %s has no phase", s.Name)
	}
	if len(s.Codes) > 0 && s.Phase.Valid() {
		return fmt.Errorf("engine: pipeline: stage %s gives codes to the closed phase %q, whose codes are the code table's (schema/internal/gencodes/table.go)", s.Name, s.Phase)
	}
	for _, c := range s.Codes {
		if c.Phase != s.Phase {
			return fmt.Errorf("engine: pipeline: stage %s gives a code of phase %q, not its own %q", s.Name, c.Phase, s.Phase)
		}
	}
	if !s.Phase.Valid() && len(s.Codes) == 0 {
		return fmt.Errorf("engine: pipeline: stage %s's phase %q is not in the code table and the stage gives no codes for it (Spec.Codes)", s.Name, s.Phase)
	}
	if s.Ingress != Internal {
		return nil
	}
	for _, code := range runnerCodes {
		if !hasCode(s, code) {
			return fmt.Errorf("engine: pipeline: stage %s's phase %q has no %s row, which its runner reports: add it to the code table (schema/internal/gencodes/table.go) or to Spec.Codes", s.Name, s.Phase, code)
		}
	}
	return nil
}

func hasCode(s Spec, code schema.Code) bool {
	if _, ok := schema.LookupCode(s.Phase, code); ok {
		return true
	}
	for _, c := range s.Codes {
		if c.Code == code {
			return true
		}
	}
	return false
}

// internalStages are the stages that consume their own stream.
func internalStages(p []Spec) []Spec {
	var out []Spec
	for _, s := range p {
		if s.Ingress == Internal {
			out = append(out, s)
		}
	}
	return out
}

// Parts are what stage constructors build from: the processor's
// configuration and shared components.
type Parts struct {
	Config   *config.Config
	Subjects subjects.Subjects
	Clock    stages.Clock
	Metrics  *metrics.Metrics
	Log      *slog.Logger
	NC       *nats.Conn
	JS       jetstream.JetStream
	// Seal is the processor's internal-message sealer.
	Seal *seal.Sealer
	// Self is the processor's instance id (pebble.Store.InstanceID).
	Self    string
	Store   *pebble.Store
	Journal kv.Journal
	// Admission are the admission stage's records. nil: on Store.
	Admission kv.Admissions
	Approvals kv.Approvals
	Activity  kv.Activity
	// Parked and Held keep envelopes per host: the parked proposals'
	// (authorization) and the held dispatches' (dispatch, reconciliation).
	Parked, Held kv.Envelopes
	// Adapters are the providers' adapters, by provider name.
	Adapters map[string]adapters.Adapter
	// Routes are every stage's route, by name.
	Routes map[string]stages.Route

	// authz is the authorization stage, shared by the authorization and
	// grants consumers (authorizationStage builds it once).
	authz *authorization.Stage
	// recon is the reconciliation stage (the operator API settles through
	// it); nil if the pipeline has none.
	recon *reconciliation.Stage
}

// The stages' settings from the configuration, in this one place: the
// stages take them as interfaces of public types (stages.Grants,
// stages.Trust), which policy.Rules and trust.Policy implement.

// rules judge grants: the managed policies and the grant time rules.
func (p *Parts) rules() policy.Rules {
	c := p.Config
	return policy.Rules{Managed: c.Policies, ClockSkew: c.Approval.ClockSkew, MaxGrantLifetime: c.Approval.MaxGrantLifetime}
}

// trust is whom admission and authorization believe: the hosts, the
// tenants, admission.allow_unsigned.
func (p *Parts) trust() trust.Policy {
	c := p.Config
	return trust.Policy{Hosts: c.Hosts, Tenants: c.Tenants, AllowUnsigned: c.Admission.AllowUnsigned}
}

func (p *Parts) stageLog(name string) *slog.Logger { return p.Log.With("stage", name) }

func newAdmission(p *Parts, r stages.Route) (stages.Handler, error) {
	var providers []string
	for _, pr := range p.Config.Providers {
		providers = append(providers, pr.Name)
	}
	c := p.Config
	records := p.Admission
	if records == nil {
		records = pebble.AdmissionRecords{Store: p.Store}
	}
	return &admission.Stage{
		Policy: admission.Policy{
			Trust:           p.trust(),
			MaxPayloadBytes: c.Admission.MaxPayloadBytes,
			Providers:       providers,
		},
		Records: records, Route: r, Clock: p.Clock, Log: p.stageLog(r.Self),
	}, nil
}

func newGrounding(p *Parts, r stages.Route) (stages.Handler, error) {
	return &grounding.Stage{
		Route: r, Clock: p.Clock, Checkpoints: p.Store,
		Source:            &grounding.Source{Conn: p.NC, Subjects: p.Subjects, Timeout: p.Config.Grounding.SourceTimeout},
		MaxCandidates:     p.Config.Grounding.MaxCandidates,
		SourceMaxInFlight: p.Config.Grounding.SourceMaxInFlight,
		Approvals:         p.Approvals,
	}, nil
}

// authorizationStage builds the authorization stage once, on the route of
// the pipeline's authorization entry: its approval timers fire on its own
// stream whichever consumer parked the proposal.
func (p *Parts) authorizationStage() (*authorization.Stage, error) {
	if p.authz != nil {
		return p.authz, nil
	}
	r, ok := p.Routes[subjects.StageAuthorization]
	if !ok {
		return nil, fmt.Errorf("engine: pipeline: the grants consumer needs the %s stage", subjects.StageAuthorization)
	}
	c := p.Config
	s := &authorization.Stage{
		Policy: authorization.Policy{
			Rules:         p.rules(),
			ApprovalTTL:   c.Approval.TTL,
			MaxGrantBytes: c.Admission.MaxPayloadBytes,
			Trust:         p.trust(),
		},
		Approvals: p.Approvals, Intents: p.Journal, Activity: p.Activity, Route: r, Clock: p.Clock, Parked: p.Parked,
		InStage: &kvjs.StreamMessages{JS: p.JS, Stream: r.Subjects.StageStream(r.Self)},
		Log:     p.stageLog(r.Self),
	}
	p.authz = s
	return s, nil
}

func newAuthorization(p *Parts, _ stages.Route) (stages.Handler, error) {
	return p.authorizationStage()
}

func newGrants(p *Parts, _ stages.Route) (stages.Handler, error) {
	s, err := p.authorizationStage()
	if err != nil {
		return nil, err
	}
	return s.Grants(), nil
}

func newDispatch(p *Parts, r stages.Route) (stages.Handler, error) {
	return &dispatch.Stage{
		Self:    p.Self,
		Journal: p.Journal, Adapters: adaptersAs[dispatch.Adapter](p.Adapters), Providers: dispatchProviders(p.Config.Providers), Policy: p.rules(),
		NC: p.NC, Route: r, Clock: p.Clock, Metrics: p.Metrics, Activity: p.Activity, Authorized: authorization.HandedOffActivity,
		Log:               p.stageLog(r.Self),
		ReconcileInterval: p.Config.Reconciliation.Interval,
		MsgID:             p.Seal.MsgID,
		Held:              p.Held,
	}, nil
}

func newReconciliation(p *Parts, r stages.Route) (stages.Handler, error) {
	// The stage that hands on to reconciliation (dispatch) takes a request
	// found lost in flight back.
	var redispatch func(token string) string
	for name, route := range p.Routes {
		if route.Next == r.Self {
			redispatch = func(token string) string { return p.Subjects.Stage(name, subjects.KindProposal, token) }
		}
	}
	p.recon = &reconciliation.Stage{
		Held: p.Held, Redispatch: redispatch,
		Journal: p.Journal, Adapters: adaptersAs[reconciliation.Adapter](p.Adapters), Route: r, Clock: p.Clock, Metrics: p.Metrics, Activity: p.Activity,
		Log:      p.stageLog(r.Self),
		Interval: p.Config.Reconciliation.Interval, MaxAttempts: p.Config.Reconciliation.MaxAttempts,
		ClockSkew: p.Config.Approval.ClockSkew,
	}
	limits := map[string]int{}
	for _, pr := range p.Config.Providers {
		limits[pr.Name] = pr.MaxInFlight
	}
	// Polls of one provider share its max_in_flight (a bulkhead of its
	// own, apart from dispatch's): a provider whose reconcile hangs delays
	// only its own intents' polls.
	return stages.WithBulkhead(p.recon, func(in *stages.Input) (string, int) {
		name, ok := p.recon.Provider(in)
		if !ok || limits[name] == 0 {
			return "", 0
		}
		return "provider/" + name, limits[name]
	}), nil
}

// Consumer is one runner of the pipeline — a stage's, or the timers
// runner of a Scheduled stage — and the durable consumers it reads.
type Consumer struct {
	// Name is the runner's `stage` metric label.
	Name string
	// Stage is the stage whose handler it feeds.
	Stage   string
	Sources []stages.Source
	// Internal: every input must carry the processor's seal (see
	// stages.RunnerConfig); Phase names its rejections.
	Internal bool
	Phase    schema.Phase
	// Codes are the stage's rows of a phase of its own (Spec.Codes).
	Codes []schema.CodeInfo
}

// Consumers lists pipeline's runners in pipeline order — a runner before
// every runner whose stage it hands on to — from the table: each stage's,
// and after a Scheduled stage's its timers runner, unless the stage is in
// legacy (its stream takes its timers: see legacyScheduled). Where hosts
// have their own streams and consumers (perHost), a stage reads each
// host's proposals through a consumer of its own, so that one host's
// backlog never makes another's proposals wait behind it (the runner's
// fetchers take turns); otherwise one consumer reads them all.
func Consumers(s subjects.Subjects, c *config.Config, pipeline []Spec, legacy map[string]bool) []Consumer {
	var out []Consumer
	hosts := perHost(c)
	for _, st := range pipeline {
		r := Consumer{Name: st.Name, Stage: st.Name}
		switch {
		case st.Ingress == Proposals && hosts:
			for _, h := range c.Hosts {
				r.Sources = append(r.Sources, stages.Source{Stream: s.HostProposalsStream(h.Name), FilterSubject: s.Proposal(h.Name), Durable: st.Name, Host: h.Name})
			}
		case st.Ingress == Proposals:
			r.Sources = []stages.Source{{Stream: s.ProposalsStream(), FilterSubject: s.Proposals(), Durable: st.Name}}
		case st.Ingress == Grants && hosts:
			for _, h := range c.Hosts {
				r.Sources = append(r.Sources, stages.Source{Stream: s.HostGrantsStream(h.Name), FilterSubject: s.Grant(h.Name), Durable: st.Name, Host: h.Name})
			}
		case st.Ingress == Grants:
			r.Sources = []stages.Source{{Stream: s.GrantsStream(), FilterSubject: s.Grants(), Durable: st.Name}}
		case legacy[st.Name]:
			r.Sources = []stages.Source{{Stream: s.StageStream(st.Name), FilterSubject: s.StageAll(st.Name), Durable: st.Name}}
		case st.TimersOnly:
			// Only timers reach it: the timers runner below is all.
		case hosts:
			for _, h := range c.Hosts {
				r.Sources = append(r.Sources, stages.Source{Stream: s.StageStream(st.Name),
					FilterSubject: s.HostStageKind(st.Name, subjects.KindProposal, h.Name), Durable: subjects.HostConsumer(st.Name, h.Name), Host: h.Name})
			}
		default:
			filter := s.StageAll(st.Name)
			if st.Scheduled {
				filter = s.StageKind(st.Name, subjects.KindProposal)
			}
			r.Sources = []stages.Source{{Stream: s.StageStream(st.Name), FilterSubject: filter, Durable: st.Name}}
		}
		if st.Ingress == Internal {
			r.Internal, r.Phase, r.Codes = true, st.Phase, st.Codes
		}
		if len(r.Sources) > 0 {
			out = append(out, r)
		}
		if st.Ingress == Internal && st.Scheduled && !legacy[st.Name] {
			name := subjects.TimersConsumer(st.Name)
			out = append(out, Consumer{Name: name, Stage: st.Name, Internal: true, Phase: st.Phase, Codes: st.Codes,
				Sources: []stages.Source{{Stream: s.TimersStream(st.Name), FilterSubject: s.StageKind(st.Name, subjects.KindTimer), Durable: name}}})
		}
	}
	return out
}

// consumerNames are the runners' names: the `stage` label values.
func consumerNames(cs []Consumer) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Name
	}
	return out
}

// runners builds one runner per consumer of the pipeline; a stage's
// consumers share its handler.
func (p *Processor) runners(pipeline []Spec, consumers []Consumer, parts *Parts, deps stages.Deps) ([]*stages.Runner, error) {
	parts.Routes = map[string]stages.Route{}
	for _, s := range pipeline {
		parts.Routes[s.Name] = stages.Route{Subjects: p.subj, Self: s.Name, Next: s.Next}
	}
	handlers := map[string]stages.Handler{}
	inFlight := map[string]int{}
	for _, s := range pipeline {
		h, err := s.New(parts, parts.Routes[s.Name])
		if err != nil {
			return nil, fmt.Errorf("engine: stage %s: %w", s.Name, err)
		}
		handlers[s.Name], inFlight[s.Name] = h, s.MaxInFlight
	}
	// What enters the pipeline from a host's ingress — its proposals, and
	// its grants, which resume parked proposals — waits there while the
	// host's proposals inside fill its bound.
	cr := newCredits(p.js, p.cfg.Streams.HostPipelineMaxMsgs, consumers, p.log, p.metrics.HostsAtPipelineBound)
	out := make([]*stages.Runner, 0, len(consumers))
	for _, c := range consumers {
		rc := stages.RunnerConfig{Stage: c.Name, Sources: c.Sources, Internal: c.Internal, Phase: c.Phase, Codes: c.Codes, MaxInFlight: inFlight[c.Stage]}
		if !c.Internal {
			rc.Admit = cr.admit
		}
		out = append(out, stages.NewRunner(rc, deps, handlers[c.Stage]))
	}
	return out, nil
}
