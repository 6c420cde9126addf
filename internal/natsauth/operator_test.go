package natsauth

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/subjects"
)

func TestOperatorRequestsAdminAndReadsHistory(t *testing.T) {
	eachServer(t, func(t *testing.T, e *env) {
		s := e.subj
		if _, err := e.proc.nc.Subscribe(s.Admins(), func(m *nats.Msg) { _ = m.Respond([]byte("admin:" + m.Subject)) }); err != nil {
			t.Fatal(err)
		}
		e.proc.noErrors(t)
		e.publishAs(t, s.OutcomeRecord("A", "p1"), `{"host":"A"}`)
		e.publishAs(t, s.OutcomeRecord("B", "p1"), `{"host":"B"}`)
		e.publishAs(t, s.Incident("admission"), `{"code":"X"}`)
		if _, err := e.kv.Put(ctxT(t), "k", []byte("v")); err != nil {
			t.Fatal(err)
		}
		o := e.connect(t, e.roles.operator)

		m, err := o.nc.Request(s.Admin(subjects.AdminReceipt), []byte("{}"), 2*time.Second)
		if err != nil || string(m.Data) != "admin:"+s.Admin(subjects.AdminReceipt) {
			t.Fatalf("admin request: %q %v", msgData(m), err)
		}

		js, err := jetstream.New(o.nc)
		if err != nil {
			t.Fatal(err)
		}
		for name, last := range map[string]string{s.OutcomesStream(): s.Outcome("B", "p1"), s.IncidentsStream(): s.Incident("admission")} {
			st, err := js.Stream(ctxT(t), name) // stream info
			if err != nil {
				t.Fatalf("stream info %s: %v", name, err)
			}
			if !st.CachedInfo().Config.AllowDirect {
				t.Fatalf("%s: direct gets off", name)
			}
			if _, err := st.GetMsg(ctxT(t), 1); err != nil { // direct get by sequence
				t.Errorf("%s: direct get by sequence: %v", name, err)
			}
			if _, err := st.GetLastMsgForSubject(ctxT(t), last); err != nil { // direct get, last for subject
				t.Errorf("%s: direct get last for %s: %v", name, last, err)
			}
		}
		// Direct get, next for a subject filter.
		m, err = o.nc.Request("$JS.API.DIRECT.GET."+s.OutcomesStream(), []byte(`{"seq":1,"next_by_subj":"actions.outcomes.B.>"}`), 2*time.Second)
		if err != nil || string(m.Data) != `{"host":"B"}` {
			t.Errorf("direct get next for a filter: %q %v", msgData(m), err)
		}
		kv, err := js.KeyValue(ctxT(t), s.ActivityBucket())
		if err != nil {
			t.Fatalf("bucket: %v", err)
		}
		if v, err := kv.Get(ctxT(t), "k"); err != nil || string(v.Value()) != "v" {
			t.Errorf("bucket get: %v", err)
		}

		// Live outcomes and incidents of every host.
		outs, err := o.nc.SubscribeSync(s.Outcomes())
		if err != nil {
			t.Fatal(err)
		}
		incs, err := o.nc.SubscribeSync(s.Incidents())
		if err != nil {
			t.Fatal(err)
		}
		o.noErrors(t)
		e.publishAs(t, s.OutcomeRecord("B", "p2"), `{}`)
		e.publishAs(t, s.Incident("dispatch"), `{}`)
		for _, sub := range []*nats.Subscription{outs, incs} {
			if _, err := sub.NextMsg(2 * time.Second); err != nil {
				t.Errorf("live %s: %v", sub.Subject, err)
			}
		}
		o.noErrors(t)
	})
}

func TestOperatorCannotWrite(t *testing.T) {
	eachServer(t, func(t *testing.T, e *env) {
		s := e.subj
		o := e.connect(t, e.roles.operator)
		bucket := "KV_" + s.ActivityBucket()
		denyPublish(t, o,
			s.Stage(subjects.StageDispatch, subjects.KindProposal, "A.p1"),
			s.Stage(subjects.StageReconciliation, subjects.KindTimer, "abc"),
			"$KV."+s.ActivityBucket()+".k",
			s.Outcome("A", "p1"),
			s.Incident("admission"),
			s.Proposal("A"),
			s.Grant("A"),
			s.ProviderDispatch("p"),
			s.DisclosureResolve(),
			s.Candidates("s"),
			subjects.Inbox(e.roles.hostA.pub)+".x",
			"$JS.API.STREAM.PURGE."+s.OutcomesStream(),
			"$JS.API.STREAM.DELETE."+s.IncidentsStream(),
			"$JS.API.STREAM.UPDATE."+bucket,
			"$JS.API.STREAM.MSG.DELETE."+s.OutcomesStream(),
			"$JS.API.STREAM.CREATE.X",
			"$JS.API.STREAM.INFO."+s.ProposalsStream(),
			"$JS.API.STREAM.INFO."+stageStream,
			"$JS.API.DIRECT.GET."+stageStream,
			"$JS.API.DIRECT.GET."+s.ProposalsStream()+"."+s.Proposal("A"),
		)
		// The bucket through the KV API: a put is a publish on $KV.<b>.<key>.
		js, err := jetstream.New(o.nc)
		if err != nil {
			t.Fatal(err)
		}
		kv, err := js.KeyValue(ctxT(t), s.ActivityBucket())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), forbiddenRequestTimeout)
		defer cancel()
		if _, err := kv.Put(ctx, "k", []byte("forged")); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("kv put: %v, want %v", err, context.DeadlineExceeded)
		}
		o.violation(t, "Publish", "$KV."+s.ActivityBucket()+".k")
		e.nothingStored(t, nil)
	})
}

func TestOperatorCannotCreateConsumers(t *testing.T) {
	eachServer(t, func(t *testing.T, e *env) {
		s := e.subj
		o := e.connect(t, e.roles.operator)
		push := []byte(`{"stream_name":"` + s.OutcomesStream() + `","config":{"durable_name":"d","deliver_subject":"` + s.ProviderDispatch("p") + `"}}`)
		for _, stream := range []string{s.OutcomesStream(), s.IncidentsStream(), "KV_" + s.ActivityBucket()} {
			for _, subject := range []string{
				"$JS.API.CONSUMER.CREATE." + stream,
				"$JS.API.CONSUMER.CREATE." + stream + ".d.>",
				"$JS.API.CONSUMER.DURABLE.CREATE." + stream + ".d",
			} {
				denyRequest(t, o, subject, push)
			}
		}
		// The jetstream API's ordered consumer (what KV Keys and Watch use).
		js, err := jetstream.New(o.nc)
		if err != nil {
			t.Fatal(err)
		}
		st, err := js.Stream(ctxT(t), s.OutcomesStream())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), forbiddenRequestTimeout)
		defer cancel()
		if _, err := st.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: "d"}); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("CreateConsumer: %v, want %v", err, context.DeadlineExceeded)
		}
		o.violation(t, "Publish", "$JS.API.CONSUMER.CREATE."+s.OutcomesStream()+".d")
		e.noConsumers(t)
	})
}

func TestOperatorCannotSubscribeElsewhere(t *testing.T) {
	eachServer(t, func(t *testing.T, e *env) {
		s := e.subj
		o := e.connect(t, e.roles.operator)
		A := subjects.Inbox(e.roles.hostA.pub)
		denySubscribe(t, e, o, map[string]string{
			s.Internal():          s.Stage(subjects.StageDispatch, subjects.KindProposal, "A.p1"),
			s.Admins():            s.Admin(subjects.AdminReceipt), // other operators' requests
			s.Proposals():         s.Proposal("A"),
			"actions.provider.>":  s.ProviderDispatch("p"),
			s.DisclosureResolve(): s.DisclosureResolve(),
			"_INBOX.>":            A + ".x",
			A + ".>":              A + ".x",
			"$KV.>":               "$KV." + s.ActivityBucket() + ".k",
			"$JS.API.>":           "$JS.API.STREAM.NAMES",
			">":                   s.Outcome("A", "p1"),
		})
	})
}

// TestOperatorBatchDirectGet: a direct get answered with several messages
// (a batch) comes back whole through the operator's import.
func TestOperatorBatchDirectGet(t *testing.T) {
	eachServer(t, func(t *testing.T, e *env) {
		s := e.subj
		for i := range 3 {
			e.publishAs(t, s.OutcomeRecord("A", "p"+strconv.Itoa(i)), `{"n":`+strconv.Itoa(i)+`}`)
		}
		o := e.connect(t, e.roles.operator)
		inbox := o.nc.NewRespInbox()
		sub, err := o.nc.SubscribeSync(inbox)
		if err != nil {
			t.Fatal(err)
		}
		if err := o.nc.PublishRequest("$JS.API.DIRECT.GET."+s.OutcomesStream(), inbox, []byte(`{"seq":1,"batch":5}`)); err != nil {
			t.Fatal(err)
		}
		var got []string
		for {
			m, err := sub.NextMsg(2 * time.Second)
			if err != nil {
				t.Fatalf("after %q: %v", got, err)
			}
			if m.Header.Get("Status") == "204" { // end of batch
				break
			}
			got = append(got, string(m.Data))
		}
		if want := []string{`{"n":0}`, `{"n":1}`, `{"n":2}`}; !slices.Equal(got, want) {
			t.Errorf("batch %q, want %q", got, want)
		}
		o.noErrors(t)
	})
}

// TestJetStreamOnlyInTheProcessorAccount: the streams and the bucket live
// in the processor's account; no other account has JetStream.
func TestJetStreamOnlyInTheProcessorAccount(t *testing.T) {
	eachServer(t, func(t *testing.T, e *env) {
		model, err := Accounts(e.cfg, e.subj, e.roles.proc.pub)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range model {
			acc, err := e.srv.LookupAccount(a.Name)
			if err != nil {
				t.Fatal(err)
			}
			if acc.JetStreamEnabled() != (a.Name == ProcessorAccount) {
				t.Errorf("account %s: JetStream %v", a.Name, acc.JetStreamEnabled())
			}
		}
		acc, err := e.srv.LookupAccount(ProcessorAccount)
		if err != nil {
			t.Fatal(err)
		}
		if n := acc.JetStreamUsage().Streams; n != 6 { // five streams and the bucket's
			t.Errorf("%d streams in %s", n, ProcessorAccount)
		}
		if e.srv.GlobalAccount().JetStreamEnabled() {
			t.Error("the global account has JetStream")
		}
	})
}
