package natsauth

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"go.uber.org/goleak"

	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/subjects"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestAccountsBlockParsesToServerAuth loads the configuration text with
// nats-server's own parser and compares it with ServerAuth on two running
// servers: the same users (key, account, permissions) and, per account as
// the server reports it (Accountz), the same JetStream flag, exports (with
// response types and approved accounts) and imports. Both must hold
// exactly the model, plus only what the server adds to every account.
func TestAccountsBlockParsesToServerAuth(t *testing.T) {
	cfg, r := newRoles(t)
	for _, prefix := range []string{"", "acme.prod-1"} {
		subj, err := subjects.New(prefix)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(subj.Prefix(), func(t *testing.T) {
			model, err := Accounts(cfg, subj, r.proc.pub)
			if err != nil {
				t.Fatal(err)
			}
			parsed := serverOptions(t, modeConfig, cfg, subj, r.proc.pub)
			embedded := serverOptions(t, modeEmbedded, cfg, subj, r.proc.pub)
			if len(parsed.Nkeys) != len(embedded.Nkeys) || len(embedded.Nkeys) != len(cfg.Roles())+1 {
				t.Fatalf("parsed %d nkey users, ServerAuth %d, config %d roles", len(parsed.Nkeys), len(embedded.Nkeys), len(cfg.Roles()))
			}
			if len(parsed.Users) != 0 {
				t.Errorf("parsed %d password users", len(parsed.Users))
			}
			// The parser reads accounts from a map: compare users by key.
			modelUsers := map[string]string{}
			for _, a := range model {
				for _, u := range a.Users {
					modelUsers[u.PublicKey] = a.Name
				}
			}
			byKey := map[string]*server.NkeyUser{}
			for _, u := range parsed.Nkeys {
				byKey[u.Nkey] = u
			}
			for _, w := range embedded.Nkeys {
				got := byKey[w.Nkey]
				if got == nil {
					t.Errorf("user %s in %s: not parsed", w.Nkey, w.Account.Name)
					continue
				}
				if got.Account.Name != w.Account.Name || !reflect.DeepEqual(got.Permissions, w.Permissions) {
					t.Errorf("user %s:\nparsed     in %s: %s\nServerAuth in %s: %s", w.Nkey,
						got.Account.Name, show(got.Permissions), w.Account.Name, show(w.Permissions))
				}
				if modelUsers[w.Nkey] != w.Account.Name {
					t.Errorf("user %s in %s, model: in %q", w.Nkey, w.Account.Name, modelUsers[w.Nkey])
				}
			}
			ps := startServer(t, parsed)
			es := startServer(t, embedded)
			if err := EnableJetStream(es); err != nil {
				t.Fatal(err)
			}
			for _, a := range model {
				pv, ev := accountView(t, ps, a.Name), accountView(t, es, a.Name)
				if pv != ev {
					t.Errorf("account %s:\nparsed     %s\nServerAuth %s", a.Name, pv, ev)
				}
				checkAgainstModel(t, ev, a)
			}
			for _, s := range []*server.Server{ps, es} {
				if n := len(accountList(t, s)); n != len(model)+2 { // and $G, $SYS
					t.Errorf("%d accounts: %v", n, accountList(t, s))
				}
				if s.GlobalAccount().JetStreamEnabled() {
					t.Error("the global account has JetStream")
				}
			}
			if !strings.Contains(mustBlock(t, cfg, subj, r.proc.pub), quote(subj.Proposal("A"))) {
				t.Errorf("block lacks %s", subj.Proposal("A"))
			}
		})
	}
}

func mustBlock(t *testing.T, cfg *config.Config, subj subjects.Subjects, key string) string {
	t.Helper()
	b, err := AccountsBlock(cfg, subj, key)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func accountList(t *testing.T, s *server.Server) []string {
	t.Helper()
	z, err := s.Accountz(&server.AccountzOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return z.Accounts
}

// view is what a running server reports of one account, in a stable order.
type view struct {
	JetStream bool
	Exports   []string // "service|stream <subject> <response type> → approved accounts"
	Imports   []string // "service|stream <subject> from <account>"
}

func accountView(t *testing.T, s *server.Server, name string) string {
	t.Helper()
	z, err := s.Accountz(&server.AccountzOptions{Account: name})
	if err != nil || z.Account == nil {
		t.Fatalf("account %s: %v", name, err)
	}
	var v view
	v.JetStream = z.Account.JetStream
	for _, e := range z.Account.Exports {
		approved := slices.Clone(e.ApprovedAccounts)
		slices.Sort(approved)
		line := fmt.Sprintf("%s %s", e.Type, e.Subject)
		if e.IsService() {
			line += " " + string(e.ResponseType)
		}
		v.Exports = append(v.Exports, line+" → "+strings.Join(approved, ","))
	}
	for _, im := range z.Account.Imports {
		v.Imports = append(v.Imports, fmt.Sprintf("%s %s from %s", im.Type, im.Subject, im.Account))
	}
	slices.Sort(v.Exports)
	slices.Sort(v.Imports)
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// checkAgainstModel: the server's account holds the model's exports and
// imports, and beyond them only the server's own imports from its system
// account; JetStream (and its API import) in the processor's account only.
func checkAgainstModel(t *testing.T, got string, a Account) {
	t.Helper()
	var v view
	if err := json.Unmarshal([]byte(got), &v); err != nil {
		t.Fatal(err)
	}
	if v.JetStream != a.JetStream {
		t.Errorf("account %s: JetStream %v, model %v", a.Name, v.JetStream, a.JetStream)
	}
	var want []string
	for _, e := range a.Exports {
		kind, rt := "stream", ""
		if e.Service {
			kind, rt = "service", " Singleton"
			if e.Streamed {
				rt = " Streamed"
			}
		}
		approved := slices.Clone(e.Accounts)
		slices.Sort(approved)
		want = append(want, kind+" "+e.Subject+rt+" → "+strings.Join(approved, ","))
	}
	slices.Sort(want)
	if !slices.Equal(v.Exports, want) {
		t.Errorf("account %s exports:\n%q\nmodel\n%q", a.Name, v.Exports, want)
	}
	left := slices.Clone(v.Imports)
	for _, im := range a.Imports {
		kind := "stream"
		if im.Service {
			kind = "service"
		}
		line := kind + " " + im.Subject + " from " + im.Account
		i := slices.Index(left, line)
		if i < 0 {
			t.Errorf("account %s lacks import %s", a.Name, line)
			continue
		}
		left = slices.Delete(left, i, i+1)
	}
	for _, line := range left {
		if !strings.HasSuffix(line, " from $SYS") {
			t.Errorf("account %s: import %s is not in the model", a.Name, line)
		}
	}
	// The server's catch-all JetStream API import: in the processor's
	// account (JetStream), never where it would race imported answers.
	importsJSAPI := slices.ContainsFunc(a.Imports, func(im AccountImport) bool {
		return im.Account == ProcessorAccount && strings.HasPrefix(im.Subject, "$JS.API.")
	})
	if catchAll := slices.Contains(left, "service $JS.API.> from $SYS"); catchAll == importsJSAPI || (a.JetStream && !catchAll) {
		t.Errorf("account %s (JetStream %v, imports JetStream API subjects %v): catch-all JetStream API import %v",
			a.Name, a.JetStream, importsJSAPI, catchAll)
	}
}

// show prints permissions for a failure message (%#v tells a nil list
// from an empty one).
func show(p *server.Permissions) string {
	if p == nil {
		return "<full rights>"
	}
	s := ""
	if p.Publish != nil {
		s += fmt.Sprintf("publish %#v ", *p.Publish)
	}
	if p.Subscribe != nil {
		s += fmt.Sprintf("subscribe %#v ", *p.Subscribe)
	}
	if p.Response != nil {
		s += fmt.Sprintf("responses %+v", *p.Response)
	}
	return s
}

// TestTableRows pins the table for the default prefix, row by row: a
// widened or narrowed grant or import fails here before any server test
// runs.
func TestTableRows(t *testing.T) {
	cfg, r := newRoles(t)
	got := Table(cfg, subjects.Default(), r.proc.pub)
	A, B, O := r.hostA.pub, r.hostB.pub, r.operator.pub
	svc := func(s string) Import { return Import{Service: true, Subject: s} }
	host := func(h, key string) Grant {
		direct := "$JS.API.DIRECT.GET.ACTIONS_OUTCOMES.actions.outcomes." + h + ".>"
		return Grant{Kind: "host", Name: h, PublicKey: key, Account: "host-" + h,
			Publish:   []string{"actions.proposals." + h, "actions.grants." + h, direct},
			Subscribe: []string{"actions.outcomes." + h + ".>", "_INBOX." + key + ".>"},
			Imports: []Import{svc("actions.proposals." + h), svc("actions.grants." + h), svc(direct),
				{Subject: "actions.outcomes." + h + ".>"}}}
	}
	var opImports []Import
	for _, s := range []string{"ACTIONS_OUTCOMES", "ACTIONS_INCIDENTS", "KV_actions_activity"} {
		opImports = append(opImports, svc("$JS.API.STREAM.INFO."+s),
			Import{Service: true, Subject: "$JS.API.DIRECT.GET." + s, Streamed: true},
			Import{Service: true, Subject: "$JS.API.DIRECT.GET." + s + ".>", Streamed: true})
	}
	want := []Grant{
		{Kind: KindProcessor, PublicKey: r.proc.pub, Account: "PORTCULLIS", Full: true},
		host("A", A),
		host("B", B),
		{Kind: "connector", Name: "cp", PublicKey: r.cp.pub, Account: "connector-cp", Reply: true,
			Subscribe: []string{"actions.provider.p.dispatch", "actions.provider.p.reconcile"},
			Serves:    []string{"actions.provider.p.dispatch", "actions.provider.p.reconcile"}},
		{Kind: "connector", Name: "cq", PublicKey: r.cq.pub, Account: "connector-cq", Reply: true,
			Subscribe: []string{"actions.provider.q.dispatch", "actions.provider.q.reconcile"},
			Serves:    []string{"actions.provider.q.dispatch", "actions.provider.q.reconcile"}},
		{Kind: "resolver", Name: "r", PublicKey: r.resolver.pub, Account: "resolver-r", Reply: true,
			Subscribe: []string{"actions.disclosure.resolve"}, Serves: []string{"actions.disclosure.resolve"}},
		{Kind: "source", Name: "s", PublicKey: r.source.pub, Account: "source-s", Reply: true,
			Subscribe: []string{"actions.candidates.s"}, Serves: []string{"actions.candidates.s"}},
		{Kind: "source", Name: "s2", PublicKey: r.source2.pub, Account: "source-s2", Reply: true,
			Subscribe: []string{"actions.candidates.s2"}, Serves: []string{"actions.candidates.s2"}},
		{Kind: "operator", Name: "o", PublicKey: O, Account: "operator-o",
			Publish: []string{"actions.admin.>",
				"$JS.API.STREAM.INFO.ACTIONS_OUTCOMES", "$JS.API.DIRECT.GET.ACTIONS_OUTCOMES", "$JS.API.DIRECT.GET.ACTIONS_OUTCOMES.>",
				"$JS.API.STREAM.INFO.ACTIONS_INCIDENTS", "$JS.API.DIRECT.GET.ACTIONS_INCIDENTS", "$JS.API.DIRECT.GET.ACTIONS_INCIDENTS.>",
				"$JS.API.STREAM.INFO.KV_actions_activity", "$JS.API.DIRECT.GET.KV_actions_activity", "$JS.API.DIRECT.GET.KV_actions_activity.>"},
			Subscribe: []string{"actions.outcomes.>", "actions.incidents.>", "_INBOX." + O + ".>"},
			Imports: append(append([]Import{svc("actions.admin.>")}, opImports...),
				Import{Subject: "actions.outcomes.>"}, Import{Subject: "actions.incidents.>"})},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("table:\n%#v\nwant\n%#v", got, want)
	}
	// Users: the processor alone has full rights; reply-only roles have an
	// explicitly empty publish allow list.
	_, users, err := ServerAuth(cfg, subjects.Default(), r.proc.pub)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range users {
		switch {
		case u.Nkey == r.proc.pub:
			if u.Permissions != nil || u.Account.Name != ProcessorAccount {
				t.Errorf("processor in %s: %s", u.Account.Name, show(u.Permissions))
			}
		case u.Permissions == nil || u.Permissions.Publish == nil || u.Permissions.Publish.Allow == nil || u.Permissions.Subscribe == nil:
			t.Errorf("user %s: %s", u.Nkey, show(u.Permissions))
		case u.Permissions.Response != nil && (len(u.Permissions.Publish.Allow) != 0 ||
			*u.Permissions.Response != server.ResponsePermission{MaxMsgs: 1, Expires: server.DEFAULT_ALLOW_RESPONSE_EXPIRATION}):
			t.Errorf("reply-only user %s: %s", u.Nkey, show(u.Permissions))
		}
	}
}

// TestAccountsModel pins the derived accounts of a small configuration:
// the processor's exports go to exactly the accounts that import them.
func TestAccountsModel(t *testing.T) {
	cfg, r := newRoles(t)
	model, err := Accounts(cfg, subjects.Default(), r.proc.pub)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, a := range model {
		names = append(names, a.Name)
		if a.JetStream != (a.Name == ProcessorAccount) {
			t.Errorf("account %s: JetStream %v", a.Name, a.JetStream)
		}
	}
	if want := []string{"PORTCULLIS", "host-A", "host-B", "connector-cp", "connector-cq", "resolver-r", "source-s", "source-s2", "operator-o", "PORTCULLIS-NOJS"}; !slices.Equal(names, want) {
		t.Errorf("accounts %q, want %q", names, want)
	}
	proc := model[0]
	exports := map[string][]string{}
	for _, e := range proc.Exports {
		exports[e.Subject] = e.Accounts
	}
	for subject, to := range map[string][]string{
		"actions.proposals.A":  {"host-A"},
		"actions.outcomes.B.>": {"host-B"},
		"$JS.API.DIRECT.GET.ACTIONS_OUTCOMES.actions.outcomes.A.>": {"host-A"},
		"actions.admin.>":                          {"operator-o"},
		"actions.outcomes.>":                       {"operator-o"},
		"$JS.API.DIRECT.GET.KV_actions_activity.>": {"operator-o"},
	} {
		if !slices.Equal(exports[subject], to) {
			t.Errorf("export %s to %q, want %q", subject, exports[subject], to)
		}
	}
	if len(exports) != 20 {
		t.Errorf("%d exports: %v", len(exports), exports)
	}
	wantImports := []AccountImport{
		{true, "connector-cp", "actions.provider.p.dispatch"}, {true, "connector-cp", "actions.provider.p.reconcile"},
		{true, "connector-cq", "actions.provider.q.dispatch"}, {true, "connector-cq", "actions.provider.q.reconcile"},
		{true, "resolver-r", "actions.disclosure.resolve"},
		{true, "source-s", "actions.candidates.s"}, {true, "source-s2", "actions.candidates.s2"},
	}
	if !reflect.DeepEqual(proc.Imports, wantImports) {
		t.Errorf("processor imports %+v", proc.Imports)
	}
	cp := model[3]
	if !reflect.DeepEqual(cp.Exports, []Export{
		{Service: true, Subject: "actions.provider.p.dispatch", Accounts: []string{"PORTCULLIS"}},
		{Service: true, Subject: "actions.provider.p.reconcile", Accounts: []string{"PORTCULLIS"}},
	}) || cp.Imports != nil {
		t.Errorf("connector account %+v", cp)
	}
	// The JetStream API shadow: from the user-less account, to exactly the
	// accounts that import JetStream API subjects.
	noJS := model[len(model)-1]
	if !reflect.DeepEqual(noJS, Account{Name: NoJetStreamAccount, Exports: []Export{
		{Service: true, Subject: "$JS.API.INFO", Accounts: []string{"host-A", "host-B", "operator-o"}}}}) {
		t.Errorf("no-JetStream account %+v", noJS)
	}
	hostA := model[1]
	if last := hostA.Imports[len(hostA.Imports)-1]; last != (AccountImport{true, NoJetStreamAccount, "$JS.API.INFO"}) {
		t.Errorf("host A's last import %+v", last)
	}
	// Without hosts and operators there is nothing to shadow.
	cfg.Hosts, cfg.Operators = nil, nil
	if model, err = Accounts(cfg, subjects.Default(), r.proc.pub); err != nil || model[len(model)-1].Name == NoJetStreamAccount {
		t.Errorf("accounts without hosts and operators: %v", err)
	}
}

// TestAccountNames: a "." in a block name (allowed for connectors,
// resolvers and operators), and anything else that is not a plain token
// byte, is escaped, so account names stay one subject token and distinct.
func TestAccountNames(t *testing.T) {
	for _, c := range [][2]string{
		{AccountName(config.KindHost, "A"), "host-A"},
		{AccountName(config.KindConnector, "pay.eu:1"), "connector-pay%2Eeu:1"},
		{AccountName(config.KindOperator, "a.b.c"), "operator-a%2Eb%2Ec"},
		{AccountName(config.KindResolver, "r\"%\n"), "resolver-r%22%25%0A"},
	} {
		if c[0] != c[1] {
			t.Errorf("account name %q, want %q", c[0], c[1])
		}
	}
	cfg, r := newRoles(t)
	cfg.Connectors[0].Name = "pay.eu"
	cfg.Connectors[1].Name = "pay_eu"
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	e := &env{cfg: cfg, roles: r, subj: subjects.Default()}
	for _, mode := range []string{modeEmbedded, modeConfig} {
		srv := startServer(t, serverOptions(t, mode, e.cfg, e.subj, r.proc.pub))
		for _, name := range []string{"connector-pay%2Eeu", "connector-pay_eu"} {
			if _, err := srv.LookupAccount(name); err != nil {
				t.Errorf("%s: account %s: %v", mode, name, err)
			}
		}
	}
}

// TestDuplicateServeRefused: two roles serving one subject cannot be
// rendered (config validation refuses such a configuration first).
func TestDuplicateServeRefused(t *testing.T) {
	cfg, r := newRoles(t)
	cfg.Connectors[1].Providers = []string{"q", "p"}
	if _, err := Accounts(cfg, subjects.Default(), r.proc.pub); !errors.Is(err, ErrDuplicateImport) ||
		!strings.Contains(err.Error(), `actions.provider.p.dispatch (connector "cp" and connector "cq")`) {
		t.Errorf("Accounts: %v", err)
	}
	if _, _, err := ServerAuth(cfg, subjects.Default(), r.proc.pub); !errors.Is(err, ErrDuplicateImport) {
		t.Errorf("ServerAuth: %v", err)
	}
	if _, err := AccountsBlock(cfg, subjects.Default(), r.proc.pub); !errors.Is(err, ErrDuplicateImport) {
		t.Errorf("AccountsBlock: %v", err)
	}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), `provider "p" is served by connector "cp" already`) {
		t.Errorf("Validate: %v", err)
	}
}

// TestAccountsBlockQuotesNames: a name that would break out of its
// comment or string is escaped, and the text still parses to the same
// users. (Configured names cannot contain such bytes; the renderer does
// not rely on that.)
func TestAccountsBlockQuotesNames(t *testing.T) {
	if got := quote("a\"b\\c\nd\x7f"); got != `"a\"b\\c\x0ad\x7f"` {
		t.Errorf("quote = %s", got)
	}
	cfg, r := newRoles(t)
	cfg.Resolvers[0].Name = "r\"\n}\n]\n# \\"
	opts := parseBlock(t, mustBlock(t, cfg, subjects.Default(), r.proc.pub))
	if want := len(cfg.Roles()) + 1; len(opts.Nkeys) != want {
		t.Fatalf("parsed %d users, want %d", len(opts.Nkeys), want)
	}
	i := slices.IndexFunc(opts.Nkeys, func(u *server.NkeyUser) bool { return u.Nkey == r.resolver.pub })
	if i < 0 || opts.Nkeys[i].Account.Name != AccountName(config.KindResolver, cfg.Resolvers[0].Name) {
		t.Errorf("resolver's user not parsed into its account (%d)", i)
	}
}
