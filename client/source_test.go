package client_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/nats-io/nkeys"

	"github.com/portcullis/portcullis/client"
	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages/grounding"
	"github.com/portcullis/portcullis/subjects"
)

func cedar(referent string) schema.Candidate {
	return schema.Candidate{Referent: referent, Source: "authoritative",
		Attributes: jsontext.Value(`{"resource":"Lumber: Cedar-8ft-GradeA"}`), EvidenceRefs: []string{"catalog:12#" + referent}}
}

// A proposal names a candidate source; grounding asks it through a client
// CandidateSource logged in as the configured source, and binds the one
// matching candidate.
func TestCandidateSourceGrounds(t *testing.T) {
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	env := testenv.New(t, testenv.WithAuth(), testenv.WithConfig(func(c *config.Config) {
		c.Sources = append(c.Sources, config.Role{Name: "catalog", PublicKey: pub})
	}))
	var mu sync.Mutex
	var asked []client.CandidateRequest
	src, err := client.ServeCandidateSource(connect(t, env, kp).Conn, client.SourceConfig{Name: "catalog"},
		client.CandidateFunc(func(_ context.Context, req client.CandidateRequest) (client.CandidateReply, error) {
			mu.Lock()
			asked = append(asked, req)
			mu.Unlock()
			if strings.Contains(req.Subject, "broken") {
				return client.CandidateReply{}, errors.New("catalog down")
			}
			other := cedar("sku-3003")
			other.Attributes = jsontext.Value(`{"resource":"Lumber: Pine-8ft"}`)
			return client.CandidateReply{Candidates: []schema.Candidate{cedar("sku-2002"), other}, ObservationRef: "catalog:13"}, nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Stop()

	host := newHost(t, env, client.HostConfig{})
	ctx := testContext(t)
	p := testenv.Lumber("prop-src")
	testenv.Delete(p, "grounding.candidates")
	testenv.Set(p, "grounding.candidate_source", "catalog")
	p = testenv.Granted(t, p, "sku-2002", time.Now())
	tr, err := host.Propose(ctx, proposal(t, p))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Stop()
	o, err := tr.Await(ctx, client.Terminal)
	if err != nil {
		t.Fatal(err)
	}
	if o.Kind != schema.KindConfirmed || o.Referent == nil || *o.Referent != "sku-2002" {
		t.Fatalf("outcome %+v", o)
	}
	mu.Lock()
	if len(asked) != 1 || asked[0].Subject != "lumber: cedar-8ft-gradea" || asked[0].Scope != testenv.SecurityDomain {
		t.Errorf("the source was asked %+v", asked)
	}
	mu.Unlock()

	// A failing source ends the proposal at once.
	p = testenv.Lumber("prop-src-broken")
	testenv.Delete(p, "grounding.candidates")
	testenv.Set(p, "grounding.candidate_source", "catalog")
	testenv.Set(p, "grounding.subject", "broken lumber")
	tr2, err := host.Propose(ctx, proposal(t, p))
	if err != nil {
		t.Fatal(err)
	}
	defer tr2.Stop()
	o, err = tr2.Await(ctx, client.Terminal)
	if err != nil {
		t.Fatal(err)
	}
	if o.Kind != schema.KindIntegrationFailure || !hasIncident(o, schema.PhaseGrounding, schema.CodeGroundingSourceUnavailable) {
		t.Errorf("outcome %+v, want INTEGRATION_FAILURE/GROUNDING_SOURCE_UNAVAILABLE", o)
	}
}

// What a CandidateSource answers, judged by the grounding stage's own
// client of candidate sources.
func TestCandidateSourceReplies(t *testing.T) {
	nc := testenv.Connect(t, testenv.StartServer(t, ""))
	src, err := client.ServeCandidateSource(nc, client.SourceConfig{Name: "catalog"},
		client.CandidateFunc(func(_ context.Context, req client.CandidateRequest) (client.CandidateReply, error) {
			switch req.Subject {
			case "error":
				return client.CandidateReply{}, errors.New("catalog down")
			case "panic":
				panic("boom")
			case "none":
				return client.CandidateReply{ObservationRef: "catalog:13"}, nil
			case "no referent":
				return client.CandidateReply{Candidates: []schema.Candidate{cedar("")}}, nil
			case "long ref":
				return client.CandidateReply{ObservationRef: strings.Repeat("r", schema.MaxRefLen+1)}, nil
			}
			return client.CandidateReply{Candidates: []schema.Candidate{cedar("sku-2002")}, ObservationRef: "catalog:13"}, nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Stop()
	ask := grounding.Source{Conn: nc, Subjects: subjects.Default(), Timeout: timeout}
	for _, tc := range []struct {
		subject    string
		candidates int
		fails      bool
	}{
		{"lumber", 1, false},
		{"none", 0, false},
		{"error", 0, true},
		{"panic", 0, true},
		{"no referent", 0, true},
		{"long ref", 0, true},
	} {
		p := &schema.Proposal{Grounding: schema.Grounding{Subject: jsontext.Value(`"` + tc.subject + `"`), Scope: "security-domain:demo", CandidateSource: "catalog"}}
		r, err := ask.Ask(testContext(t), p)
		switch {
		case tc.fails && !errors.Is(err, grounding.ErrSourceUnavailable):
			t.Errorf("%s: grounding got %v, want ErrSourceUnavailable", tc.subject, err)
		case !tc.fails && (err != nil || len(r.Candidates) != tc.candidates):
			t.Errorf("%s: grounding got %+v, %v", tc.subject, r, err)
		}
	}
	m, err := nc.Request(subjects.Default().Candidates("catalog"), []byte(`{"subject":"x","scope":"y","extra":1}`), timeout)
	if err != nil || m.Header.Get("Nats-Service-Error-Code") != "400" || len(m.Data) != 0 {
		t.Errorf("malformed request: %v %v", m, err)
	}
}
