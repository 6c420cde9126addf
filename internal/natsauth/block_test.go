package natsauth

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"go.uber.org/goleak"

	"github.com/portcullis/portcullis/subjects"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestAuthorizationBlockParsesToUsers loads the block with nats-server's own
// configuration parser and compares every parsed nkey user and its
// permissions with Users.
func TestAuthorizationBlockParsesToUsers(t *testing.T) {
	cfg, r := newRoles(t)
	for _, prefix := range []string{"", "acme.prod-1"} {
		subj, err := subjects.New(prefix)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(subj.Prefix(), func(t *testing.T) {
			block := AuthorizationBlock(cfg, subj, r.proc.pub)
			opts := parseBlock(t, block)
			want := Users(cfg, subj, r.proc.pub)
			if len(opts.Nkeys) != len(want) || len(want) != len(cfg.Roles())+1 {
				t.Fatalf("parsed %d nkey users, Users has %d, config %d roles", len(opts.Nkeys), len(want), len(cfg.Roles()))
			}
			if len(opts.Users) != 0 {
				t.Errorf("parsed %d password users", len(opts.Users))
			}
			for i, w := range want {
				got := opts.Nkeys[i]
				if got.Nkey != w.Nkey || !reflect.DeepEqual(got.Permissions, w.Permissions) {
					t.Errorf("user %d:\nparsed %s %s\nUsers  %s %s", i, got.Nkey, show(got.Permissions), w.Nkey, show(w.Permissions))
				}
			}
			if !strings.Contains(block, subj.Proposal("A")) {
				t.Errorf("block lacks %s", subj.Proposal("A"))
			}
		})
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

// TestTableRows pins the rendered table for the default prefix, row by
// row: a widened or narrowed grant fails here before any server test runs.
func TestTableRows(t *testing.T) {
	cfg, r := newRoles(t)
	got := Table(cfg, subjects.Default(), r.proc.pub)
	A, B, O := r.hostA.pub, r.hostB.pub, r.operator.pub
	want := []Grant{
		{Kind: KindProcessor, PublicKey: r.proc.pub, Full: true},
		{Kind: "host", Name: "A", PublicKey: A,
			Publish:   []string{"actions.proposals.A", "actions.grants.A", "$JS.API.DIRECT.GET.ACTIONS_OUTCOMES.actions.outcomes.A.>"},
			Subscribe: []string{"actions.outcomes.A.>", "_INBOX." + A + ".>"}},
		{Kind: "host", Name: "B", PublicKey: B,
			Publish:   []string{"actions.proposals.B", "actions.grants.B", "$JS.API.DIRECT.GET.ACTIONS_OUTCOMES.actions.outcomes.B.>"},
			Subscribe: []string{"actions.outcomes.B.>", "_INBOX." + B + ".>"}},
		{Kind: "connector", Name: "cp", PublicKey: r.cp.pub, Reply: true,
			Subscribe: []string{"actions.provider.p.dispatch", "actions.provider.p.reconcile"}},
		{Kind: "connector", Name: "cq", PublicKey: r.cq.pub, Reply: true,
			Subscribe: []string{"actions.provider.q.dispatch", "actions.provider.q.reconcile"}},
		{Kind: "resolver", Name: "r", PublicKey: r.resolver.pub, Reply: true, Subscribe: []string{"actions.disclosure.resolve"}},
		{Kind: "source", Name: "s", PublicKey: r.source.pub, Reply: true, Subscribe: []string{"actions.candidates.s"}},
		{Kind: "source", Name: "s2", PublicKey: r.source2.pub, Reply: true, Subscribe: []string{"actions.candidates.s2"}},
		{Kind: "operator", Name: "o", PublicKey: O,
			Publish: []string{"actions.admin.>",
				"$JS.API.STREAM.INFO.ACTIONS_OUTCOMES", "$JS.API.DIRECT.GET.ACTIONS_OUTCOMES", "$JS.API.DIRECT.GET.ACTIONS_OUTCOMES.>",
				"$JS.API.STREAM.INFO.ACTIONS_INCIDENTS", "$JS.API.DIRECT.GET.ACTIONS_INCIDENTS", "$JS.API.DIRECT.GET.ACTIONS_INCIDENTS.>",
				"$JS.API.STREAM.INFO.KV_actions_activity", "$JS.API.DIRECT.GET.KV_actions_activity", "$JS.API.DIRECT.GET.KV_actions_activity.>"},
			Subscribe: []string{"actions.outcomes.>", "actions.incidents.>", "_INBOX." + O + ".>"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("table:\n%#v\nwant\n%#v", got, want)
	}
	// Users: the processor alone has full rights; reply-only roles have an
	// explicitly empty publish allow list.
	for _, u := range Users(cfg, subjects.Default(), r.proc.pub) {
		switch {
		case u.Nkey == r.proc.pub:
			if u.Permissions != nil {
				t.Errorf("processor permissions %s", show(u.Permissions))
			}
		case u.Permissions == nil || u.Permissions.Publish == nil || u.Permissions.Publish.Allow == nil || u.Permissions.Subscribe == nil:
			t.Errorf("user %s: %s", u.Nkey, show(u.Permissions))
		case u.Permissions.Response != nil && (len(u.Permissions.Publish.Allow) != 0 ||
			*u.Permissions.Response != server.ResponsePermission{MaxMsgs: 1, Expires: server.DEFAULT_ALLOW_RESPONSE_EXPIRATION}):
			t.Errorf("reply-only user %s: %s", u.Nkey, show(u.Permissions))
		}
	}
}

// TestAuthorizationBlockQuotesNames: a name that would break out of its
// comment or string is escaped, and the text still parses to the same
// users. (Configured names cannot contain such bytes; the renderer does
// not rely on that.)
func TestAuthorizationBlockQuotesNames(t *testing.T) {
	if got := quote("a\"b\\c\nd\x7f"); got != `"a\"b\\c\x0ad\x7f"` {
		t.Errorf("quote = %s", got)
	}
	cfg, r := newRoles(t)
	cfg.Resolvers[0].Name = "r\"\n}\n]\n# \\"
	opts := parseBlock(t, AuthorizationBlock(cfg, subjects.Default(), r.proc.pub))
	if want := Users(cfg, subjects.Default(), r.proc.pub); len(opts.Nkeys) != len(want) {
		t.Fatalf("parsed %d users, want %d", len(opts.Nkeys), len(want))
	}
}
