package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/portcullis/portcullis/internal/testenv"
)

// TestOperatorRefusalsFailFast: against a processor whose NATS server
// authenticates every client, a login that may not send operator requests,
// a login the server refuses and a URL that is not NATS each end the
// command at once (well under its 30 s request timeout), exit 1, with a
// line that says who was refused and what to pass (issue 23: a host's key
// printed the violation, then waited 30 s for "context deadline
// exceeded"; no --nkey said "cannot reach NATS"; http:// waited 5 s).
func TestOperatorRefusalsFailFast(t *testing.T) {
	env := testenv.New(t, testenv.WithAuth())
	url := env.Server.ClientURL()
	hostPub, _ := env.Host.PublicKey()
	connPub, _ := env.Connector.PublicKey()
	stranger, _ := nkeys.CreateUser()
	strangerPub, _ := stranger.PublicKey()
	op := writeSeed(t, env.Operator)
	list := []string{"reconcile", "list", "--url", url}
	cases := []struct {
		name string
		env  map[string]string
		args []string
		want []string // in stderr, in this order
	}{
		{"a host's key", nil, append(list, "--nkey", writeSeed(t, env.Host)), []string{
			"processor reconcile list: admin: actions.admin.reconcile.list: NATS refused the login of " + hostPub + ": ",
			`Permissions Violation for Publish to "actions.admin.reconcile.list"`,
			"this key may not send operator requests; use an operator key (--nkey FILE"}},
		{"a connector's key", nil, append(list, "--nkey", writeSeed(t, env.Connector)), []string{
			"NATS refused the login of " + connPub + ": ", "Permissions Violation", "use an operator key (--nkey FILE"}},
		{"the operator, another prefix", nil, append(list, "--nkey", op, "--prefix", "wrong"), []string{
			`Permissions Violation for Publish to "wrong.admin.reconcile.list"`, "with one, check that --prefix is the processor's subjects.prefix"}},
		{"activity get with a host's key", nil, []string{"activity", "get", strings.Repeat("ab", 32), "--url", url, "--nkey", writeSeed(t, env.Host)}, []string{
			"processor activity get: bucket actions_activity: NATS refused the login of " + hostPub, "Permissions Violation", "use an operator key"}},
		{"no key", nil, list, []string{
			"processor reconcile list: NATS at " + url + " refused an anonymous login (nats: Authorization Violation): it requires one; pass --nkey FILE, the seed of an operator block's key (or set $" + EnvOperatorNkey + ")"}},
		{"a stranger's key", nil, append(list, "--nkey", writeSeed(t, stranger)), []string{
			"processor reconcile list: NATS at " + url + " refused the login of " + strangerPub + " (nats: Authorization Violation): is it the key of an operator block",
			"Pass that key's seed with --nkey FILE"}},
		{"http:// --url", nil, []string{"reconcile", "list", "--url", "http://127.0.0.1:9464", "--nkey", op}, []string{
			"processor reconcile list: --url http://127.0.0.1:9464 is not a NATS server URL: give nats://host:port"}},
		{"https:// in NATS_URL", map[string]string{EnvNATSURL: "nats://127.0.0.1:4222,https://example.com"}, []string{"approvals", "list", "--nkey", op}, []string{
			"processor approvals list: $NATS_URL https://example.com is not a NATS server URL"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, k := range []string{EnvNATSURL, EnvOperatorNkey} {
				t.Setenv(k, c.env[k])
			}
			var out, errb bytes.Buffer
			start := time.Now()
			code := run(c.args, nil, &out, &errb)
			took := time.Since(start)
			t.Logf("exit %d after %s: %s", code, took.Round(time.Millisecond), strings.TrimSpace(errb.String()))
			if code != 1 || out.Len() != 0 || strings.Count(errb.String(), "\n") != 1 {
				t.Fatalf("exit %d, stdout %q, stderr %q: want exit 1 and one line", code, out.String(), errb.String())
			}
			rest := errb.String()
			for _, w := range c.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("stderr %q lacks %q (in order)", errb.String(), w)
				}
				rest = rest[i+len(w):]
			}
			if took > failFast {
				t.Errorf("took %s, want at once (under %s; the request timeout is 30s)", took, failFast)
			}
		})
	}
}
