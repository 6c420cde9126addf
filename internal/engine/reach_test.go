package engine_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
)

// A provider nobody serves says so while its proposal waits — a warning
// in the log (once), a line on /readyz (which still answers 200: the
// processor is ready) and actions_provider_unreachable{provider} = 1 —
// and stops saying so once a connector answers (issue 34: 30 s of
// silence, then FAILED_BEFORE_DISPATCH). Nothing of the proposal is in
// what it says.
func TestUnreachableProviderSaysSo(t *testing.T) {
	env := testenv.New(t, fastLag)
	p := env.Processor()
	addr := p.MetricsAddr()
	secret := "sku-SECRET-VALUE-4711"
	m := testenv.Set(testenv.Lumber("no-connector"), "intent.provider", "inventory")
	testenv.Set(m, "intent.payload", map[string]any{"quantity": 3, "note": secret})
	env.PublishSigned(t, testenv.Granted(t, m, "sku-1001", time.Now()), env.Host)

	want := "provider inventory: unreachable for "
	waitFor(t, func() (bool, string) {
		c, b, _ := get(t, http.MethodGet, "http://"+addr+"/readyz")
		return c == http.StatusOK && strings.HasPrefix(b, "ok\n"+want) && strings.Contains(b, "dispatches wait up to 2s"), b
	})
	if v := testutil.ToFloat64(p.Metrics().ProviderUnreachable.WithLabelValues("inventory")); v != 1 {
		t.Errorf("actions_provider_unreachable{provider=inventory} = %v, want 1", v)
	}
	if v := testutil.ToFloat64(p.Metrics().ProviderUnreachable.WithLabelValues("demo")); v != 0 {
		t.Errorf("actions_provider_unreachable{provider=demo} = %v, want 0", v)
	}
	env.Logs.Wait(t, "provider unreachable")
	if n := strings.Count(string(env.Logs.Bytes()), `"msg":"provider unreachable`); n != 1 {
		t.Errorf("%d warnings, want one per episode", n)
	}
	o := env.Recorder.Wait(t, "no-connector", testenv.Terminal)
	if o.Kind != schema.KindFailedBeforeDispatch {
		t.Fatalf("outcome %s", o.Kind)
	}

	// A connector comes: the next dispatch is answered.
	cn := env.ConnectAs(t, env.Connector)
	sub, err := cn.QueueSubscribe(env.Subjects.ProviderDispatch("inventory"), "inventory", func(msg *nats.Msg) {
		data, _ := json.Marshal(schema.AdapterReply{Outcome: schema.ReplyConfirmed, ProviderActionID: "inv-1"})
		_ = msg.Respond(data)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := cn.Flush(); err != nil {
		t.Fatal(err)
	}
	m2 := testenv.Set(testenv.Lumber("with-connector"), "intent.provider", "inventory")
	testenv.Set(m2, "intent.payload", map[string]any{"quantity": 4})
	env.PublishSigned(t, testenv.Granted(t, m2, "sku-1001", time.Now()), env.Host)
	if o := env.Recorder.Wait(t, "with-connector", testenv.Terminal); o.Kind != schema.KindConfirmed {
		t.Fatalf("outcome with a connector: %s", o.Kind)
	}
	waitReadyz(t, addr, http.StatusOK, "ok\n")
	if v := testutil.ToFloat64(p.Metrics().ProviderUnreachable.WithLabelValues("inventory")); v != 0 {
		t.Errorf("actions_provider_unreachable{provider=inventory} = %v after a reply, want 0", v)
	}
	env.Logs.Wait(t, "provider reachable again")
	env.AssertNowhere(t, secret)
}
