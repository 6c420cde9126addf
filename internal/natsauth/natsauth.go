// Package natsauth is the NATS access model of SPEC §2.8, declared once as
// data (Table, and the accounts derived from it by Accounts) and rendered
// twice: as accounts and nkey users for the embedded server (ServerAuth,
// then EnableJetStream once it runs) and as nats-server configuration text
// for an external deployment (AccountsBlock). Both renderings grant exactly
// the same; the tests compare them on running servers.
//
// Two layers:
//
//  1. Accounts. The processor's identity is the one user of the account
//     ProcessorAccount, which alone has JetStream (streams, consumers, the
//     activity bucket) and every internal subject. Every role block is its
//     own account ("host-A", "connector-c", … AccountName) that exists in
//     a subject space of its own and sees of the processor's account only
//     its imports: a host imports its proposal and grant subjects and the
//     direct get of its own outcome subjects as services and its outcome
//     subjects as a stream; an operator imports the operator API, stream
//     info and direct gets of the public streams and the bucket as
//     services, and outcomes and incidents as streams. Connectors,
//     resolvers and sources export the subjects they serve, and the
//     processor's account imports them. Clients see the same subjects as
//     before: no client changes.
//  2. Per-user permissions inside each account (the publish and subscribe
//     lists of Table), as before: a second, independent door.
//
// Why accounts: the server publishes its answer to a request (a JetStream
// PubAck, a direct-get response, any service reply) on the reply subject
// the requester chose, and no permission checks that subject. In one
// shared account a host could so place server-made messages on another
// host's outcome subject, on internal subjects or in the activity bucket.
// Across a service import the server hands the exporter a reply subject
// of its own (_R_.…) and delivers the answer on the requester's reply
// subject in the requester's account: to that account's own subscriptions
// and, when the subject is one of the account's own service imports, on to
// the processor's account as a publish the role may make itself anyway
// (not back through the import it came by: the server drops that cycle).
// What remains is within one identity: a client with host A's key can
// make A's own outcome subscribers see a server-made message (a PubAck, a
// copy of one of A's outcomes) on one of A's outcome subjects; readers
// should check the proposal_id in the body.
//
// What the tests check against a real nats-server (both renderings):
//
//   - A host's js.Publish through the service import gets its PubAck on its
//     own inbox; its direct get of the last message on one of its own
//     outcome subjects works through the import, a request body naming a
//     sequence or another subject gets 408 and no message, and nothing
//     else of any stream is reachable; outcomes arrive live through the
//     stream import. An operator gets stream info and every form of direct
//     get, batches included (streamed responses), on the two public
//     streams and the bucket's, and outcomes and incidents live.
//   - The processor's requests reach a connector, resolver or source in its
//     account through the import, its single reply comes back (a second is
//     refused), several processes of one connector share its requests in a
//     queue group, and a request nobody serves fails at once with "no
//     responders" (what the nats adapter treats as not dispatched), not
//     with a timeout.
//   - Reply-subject injection by a host or an operator (PubAcks, direct
//     gets, operator API replies aimed at another host's outcome subject,
//     internal subjects, the bucket, the JetStream API) stores nothing and
//     delivers nothing outside its own account.
//   - Each layer holds alone: with every per-user permission removed, the
//     accounts still keep each role to its row; within an account, the
//     per-user permissions still refuse what they refused before: a
//     present but empty publish allow list denies every publish, a
//     response permission admits one reply per received request, and each
//     identity receives replies only under its own inbox prefix
//     _INBOX.<public key> (subjects.Inbox).
//   - JetStream lives in the processor's account only; no client role can
//     create consumers (a consumer's deliver subject would escape every
//     publish permission) or streams.
//
// Constraints that follow: each provider has at most one connector block
// and there is at most one resolver block (config enforces both), because
// two imports of one subject hand every request to both accounts (queue
// groups do not span accounts). Several processes of one connector share
// its key and a queue group.
//
// One mechanism beyond the table: the server gives every account without
// JetStream a catch-all import of the JetStream API ($JS.API.>) from its
// system account, which answers "JetStream not enabled for account" and so
// races every imported stream info and direct get. It leaves that import
// out of an account that already imports $JS.API.INFO; so every account
// that imports JetStream API subjects imports $JS.API.INFO from
// NoJetStreamAccount, an account without users or JetStream, where the
// server's own catch-all gives the usual "not enabled" answer. (Importing
// it from the processor's account would hand its account statistics to
// the roles' accounts.)
//
// It owns the NATS accounts, users and permissions of SPEC §2.8, derived
// from the configuration; it imports config and subjects only.
package natsauth

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/subjects"
)

// KindProcessor is the Kind of the processor's own identity in Table.
const KindProcessor = "processor"

// ProcessorAccount is the NATS account of the processor's own identity,
// of JetStream and of every internal subject.
const ProcessorAccount = "PORTCULLIS"

// NoJetStreamAccount exports jsShadow to every account that imports
// JetStream API subjects (see the package doc). It has no users.
const NoJetStreamAccount = "PORTCULLIS-NOJS"

// jsShadow: an account that imports it gets no catch-all import of the
// JetStream API from the server.
const jsShadow = "$JS.API.INFO"

// ErrDuplicateImport: two accounts would serve one subject to the
// processor's account (config validation refuses such a configuration).
var ErrDuplicateImport = errors.New("natsauth: two roles serve one subject")

// AccountName is the NATS account of a role block: "<kind>-<name>", every
// byte of the name other than A-Z a-z 0-9 _ : - written %XX (so "." is
// "%2E": account names appear as one token in the server's own subjects,
// and the configuration parser takes a quoted account name without
// escapes). Kind prefixes keep the names unique across kinds and apart
// from ProcessorAccount and NoJetStreamAccount.
func AccountName(kind, name string) string {
	var b strings.Builder
	b.WriteString(kind + "-")
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '_', c == ':', c == '-':
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// Import is one subject that a role's account imports from the processor's
// account.
type Import struct {
	// Service: the role's publishes and requests on Subject go to the
	// processor's account and the answers come back to the role's reply
	// subject (JetStream PubAcks, direct gets, operator API replies).
	// Otherwise a stream: the processor's account's messages on Subject
	// are delivered to the role's account.
	Service bool
	Subject string
	// Streamed: a request may be answered with several messages (a batch
	// direct get); otherwise with one.
	Streamed bool
}

// Grant is one identity's row of the access table.
type Grant struct {
	// Kind is a config block kind (config.KindHost, …) or KindProcessor.
	Kind string
	// Name is the block's label; "" for the processor.
	Name string
	// PublicKey is the identity's nkey (U…), the user it logs in as.
	PublicKey string
	// Account is the NATS account the user belongs to.
	Account string
	// Full: no restriction within its account (the processor itself).
	Full bool
	// Publish lists the subjects it may publish on; empty: none.
	Publish []string
	// Subscribe lists the subjects it may subscribe to.
	Subscribe []string
	// Reply: it may also publish one reply to each request it received,
	// within the server's default window (two minutes), and nothing else.
	Reply bool
	// Imports: what its account imports from the processor's account.
	Imports []Import
	// Serves: the services its account exports to the processor's
	// account, which imports them (requests from the processor, one reply
	// each).
	Serves []string
}

// Table is the access table of SPEC §2.8 for a configuration: the
// processor's own identity (public key processorKey, full rights) first,
// then every configured role in the order of cfg.Roles().
func Table(cfg *config.Config, subj subjects.Subjects, processorKey string) []Grant {
	out := []Grant{{Kind: KindProcessor, PublicKey: processorKey, Account: ProcessorAccount, Full: true}}
	inbox := func(key string) string { return subjects.Inbox(key) + ".>" }
	service := func(s string) Import { return Import{Service: true, Subject: s} }
	for _, r := range cfg.Roles() {
		g := Grant{Kind: r.Kind, Name: r.Name, PublicKey: r.PublicKey, Account: AccountName(r.Kind, r.Name)}
		switch r.Kind {
		case config.KindHost:
			// History: direct gets of the last message of one of its own
			// outcome subjects, and nothing else of any stream.
			directGet := subjects.DirectGetLast(subj.OutcomesStream(), subj.HostOutcomes(r.Name))
			g.Publish = []string{subj.Proposal(r.Name), subj.Grant(r.Name), directGet}
			g.Subscribe = []string{subj.HostOutcomes(r.Name), inbox(r.PublicKey)}
			g.Imports = []Import{
				service(subj.Proposal(r.Name)),
				service(subj.Grant(r.Name)),
				service(directGet),
				{Subject: subj.HostOutcomes(r.Name)},
			}
		case config.KindConnector:
			for _, c := range cfg.Connectors {
				if c.Name != r.Name {
					continue
				}
				for _, p := range c.Providers {
					g.Serves = append(g.Serves, subj.ProviderDispatch(p), subj.ProviderReconcile(p))
				}
			}
			g.Subscribe = slices.Clone(g.Serves)
			g.Reply = true
		case config.KindResolver:
			g.Serves = []string{subj.DisclosureResolve()}
			g.Subscribe = slices.Clone(g.Serves)
			g.Reply = true
		case config.KindSource:
			g.Serves = []string{subj.Candidates(r.Name)}
			g.Subscribe = slices.Clone(g.Serves)
			g.Reply = true
		case config.KindOperator:
			g.Publish = []string{subj.Admins()}
			g.Imports = []Import{service(subj.Admins())}
			// Stream info and every form of direct get (by sequence, last
			// for a subject, next for a filter, batches) on the two public
			// streams and the bucket's stream: reading, never writing or
			// consuming.
			for _, stream := range []string{subj.OutcomesStream(), subj.IncidentsStream(), "KV_" + subj.ActivityBucket()} {
				byBody, bySubject := "$JS.API.DIRECT.GET."+stream, "$JS.API.DIRECT.GET."+stream+".>"
				g.Publish = append(g.Publish, "$JS.API.STREAM.INFO."+stream, byBody, bySubject)
				g.Imports = append(g.Imports,
					service("$JS.API.STREAM.INFO."+stream),
					Import{Service: true, Subject: byBody, Streamed: true},
					Import{Service: true, Subject: bySubject, Streamed: true},
				)
			}
			g.Subscribe = []string{subj.Outcomes(), subj.Incidents(), inbox(r.PublicKey)}
			g.Imports = append(g.Imports, Import{Subject: subj.Outcomes()}, Import{Subject: subj.Incidents()})
		default:
			// A kind this table does not know gets nothing: it cannot log in.
			continue
		}
		out = append(out, g)
	}
	return out
}

// Permissions renders a grant's per-user permissions; nil for full rights.
func (g Grant) Permissions() *server.Permissions {
	if g.Full {
		return nil
	}
	p := &server.Permissions{
		Publish:   allowOnly(g.Publish),
		Subscribe: allowOnly(g.Subscribe),
	}
	if g.Reply {
		// An empty, non-nil allow list denies every publish by itself; the
		// response permission then admits the replies. This is also what the
		// server's configuration parser makes of `allow_responses`.
		p.Publish = &server.SubjectPermission{Allow: []string{}}
		p.Response = &server.ResponsePermission{
			MaxMsgs: server.DEFAULT_ALLOW_RESPONSE_MAX_MSGS,
			Expires: server.DEFAULT_ALLOW_RESPONSE_EXPIRATION,
		}
	}
	return p
}

// allowOnly allows exactly subjects; for none it denies everything, because
// the server (and its configuration parser) treat an absent or empty allow
// list as "no restriction".
func allowOnly(subjects []string) *server.SubjectPermission {
	if len(subjects) == 0 {
		return &server.SubjectPermission{Deny: []string{">"}}
	}
	return &server.SubjectPermission{Allow: slices.Clone(subjects)}
}

// Account is one NATS account of the model.
type Account struct {
	Name string
	// JetStream: streams, consumers and the bucket live here (the
	// processor's account, and no other).
	JetStream bool
	// Users: the account's one identity; none for NoJetStreamAccount.
	Users   []Grant
	Exports []Export
	Imports []AccountImport
}

// Export is a subject an account lets the listed accounts import.
type Export struct {
	Service  bool
	Subject  string
	Streamed bool // services: several answers to one request
	Accounts []string
}

// AccountImport is a subject an account imports from another.
type AccountImport struct {
	Service bool
	Account string // the exporting account
	Subject string
}

// Accounts derives the accounts of Table: the processor's account first
// (JetStream; exporting every role's imports to exactly the accounts that
// import them; importing every served subject from its role's account),
// then one account per role, then NoJetStreamAccount when some account
// imports JetStream API subjects. Two roles serving one subject is
// ErrDuplicateImport.
func Accounts(cfg *config.Config, subj subjects.Subjects, processorKey string) ([]Account, error) {
	rows := Table(cfg, subj, processorKey)
	proc := Account{Name: ProcessorAccount, JetStream: true, Users: rows[:1]}
	noJS := Account{Name: NoJetStreamAccount, Exports: []Export{{Service: true, Subject: jsShadow}}}
	exportAt := map[Import]int{}
	servedBy := map[string]string{}
	out := []Account{{}}
	for _, g := range rows[1:] {
		acc := Account{Name: g.Account, Users: []Grant{g}}
		jsAPI := false
		for _, im := range g.Imports {
			acc.Imports = append(acc.Imports, AccountImport{Service: im.Service, Account: ProcessorAccount, Subject: im.Subject})
			jsAPI = jsAPI || strings.HasPrefix(im.Subject, "$JS.API.")
			i, ok := exportAt[im]
			if !ok {
				i = len(proc.Exports)
				exportAt[im] = i
				proc.Exports = append(proc.Exports, Export{Service: im.Service, Subject: im.Subject, Streamed: im.Streamed})
			}
			proc.Exports[i].Accounts = append(proc.Exports[i].Accounts, g.Account)
		}
		if jsAPI {
			acc.Imports = append(acc.Imports, AccountImport{Service: true, Account: NoJetStreamAccount, Subject: jsShadow})
			noJS.Exports[0].Accounts = append(noJS.Exports[0].Accounts, g.Account)
		}
		for _, s := range g.Serves {
			if other, dup := servedBy[s]; dup {
				return nil, fmt.Errorf("%w: %s (%s and %s %q)", ErrDuplicateImport, s, other, g.Kind, g.Name)
			}
			servedBy[s] = g.Kind + " " + strconv.Quote(g.Name)
			acc.Exports = append(acc.Exports, Export{Service: true, Subject: s, Accounts: []string{ProcessorAccount}})
			proc.Imports = append(proc.Imports, AccountImport{Service: true, Account: g.Account, Subject: s})
		}
		out = append(out, acc)
	}
	out[0] = proc
	if len(noJS.Exports[0].Accounts) > 0 {
		out = append(out, noJS)
	}
	return out, nil
}

// ServerAuth renders the model for the embedded server: set
// server.Options.Accounts and .Nkeys to the results (each user bound to
// its account), start the server, then call EnableJetStream, because the
// server's exported API enables JetStream for one account only once the
// server runs. Anonymous and unknown clients are refused.
func ServerAuth(cfg *config.Config, subj subjects.Subjects, processorKey string) ([]*server.Account, []*server.NkeyUser, error) {
	model, err := Accounts(cfg, subj, processorKey)
	if err != nil {
		return nil, nil, err
	}
	byName := map[string]*server.Account{}
	var accs []*server.Account
	for _, a := range model {
		acc := server.NewAccount(a.Name)
		byName[a.Name] = acc
		accs = append(accs, acc)
	}
	// Exports first: an import is checked against its export.
	for _, a := range model {
		acc := byName[a.Name]
		for _, e := range a.Exports {
			var to []*server.Account
			for _, n := range e.Accounts {
				to = append(to, byName[n])
			}
			if e.Service {
				rt := server.Singleton
				if e.Streamed {
					rt = server.Streamed
				}
				err = acc.AddServiceExportWithResponse(e.Subject, rt, to)
			} else {
				err = acc.AddStreamExport(e.Subject, to)
			}
			if err != nil {
				return nil, nil, fmt.Errorf("natsauth: account %s: export %s: %w", a.Name, e.Subject, err)
			}
		}
	}
	var users []*server.NkeyUser
	for _, a := range model {
		acc := byName[a.Name]
		for _, im := range a.Imports {
			if im.Service {
				err = acc.AddServiceImport(byName[im.Account], im.Subject, "")
			} else {
				err = acc.AddStreamImport(byName[im.Account], im.Subject, "")
			}
			if err != nil {
				return nil, nil, fmt.Errorf("natsauth: account %s: import %s from %s: %w", a.Name, im.Subject, im.Account, err)
			}
		}
		for _, u := range a.Users {
			users = append(users, &server.NkeyUser{Nkey: u.PublicKey, Permissions: u.Permissions(), Account: acc})
		}
	}
	return accs, users, nil
}

// EnableJetStream enables JetStream, with the server's limits, in the
// processor's account of a running server configured by ServerAuth (the
// configuration text's `jetstream = enabled`). No other account has it.
func EnableJetStream(srv *server.Server) error {
	acc, err := srv.LookupAccount(ProcessorAccount)
	if err != nil {
		return fmt.Errorf("natsauth: account %s: %w", ProcessorAccount, err)
	}
	if err := acc.EnableJetStream(nil, nil); err != nil {
		return fmt.Errorf("natsauth: JetStream for account %s: %w", ProcessorAccount, err)
	}
	return nil
}

// AccountsBlock renders the model as nats-server configuration text: an
// `accounts { … }` block with every account, its user, exports and
// imports, and JetStream enabled for the processor's account, for each
// server of an external deployment (whose configuration also enables
// JetStream itself with a `jetstream { … }` block).
func AccountsBlock(cfg *config.Config, subj subjects.Subjects, processorKey string) (string, error) {
	model, err := Accounts(cfg, subj, processorKey)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("# Portcullis NATS accounts (SPEC §2.8), subject prefix " + quote(subj.Prefix()) + ".\n")
	b.WriteString("# Generated by `processor nats-permissions`: regenerate it whenever roles change.\n")
	b.WriteString("# Each role is an account of its own that sees only what it imports from the\n")
	b.WriteString("# processor's account " + ProcessorAccount + " (which alone has JetStream); inside it, its one\n")
	b.WriteString("# nkey user has per-user permissions as a second layer. A user without\n")
	b.WriteString("# `permissions` has full rights in its account: only the processor's own.\n")
	b.WriteString("# `allow_responses` also forbids every other publish; keep it with its role.\n")
	b.WriteString("# The server needs `jetstream { … }` too, with max_file_store at least the sum\n")
	b.WriteString("# of the streams' budgets (JetStream reserves them); keep these accounts as they are.\n")
	b.WriteString("accounts {\n")
	for i, a := range model {
		if i > 0 {
			b.WriteString("\n")
		}
		switch {
		case a.Name == ProcessorAccount:
			b.WriteString("  # the Portcullis processor: streams, consumers, the activity bucket, internal subjects\n")
		case a.Name == NoJetStreamAccount:
			b.WriteString("  # no users: keeps the server's catch-all JetStream API import out of the\n")
			b.WriteString("  # accounts that import stream info and direct gets\n")
		default:
			b.WriteString("  # " + a.Users[0].Kind + " " + quote(a.Users[0].Name) + "\n")
		}
		b.WriteString("  " + quote(a.Name) + " {\n")
		if a.JetStream {
			b.WriteString("    jetstream = \"enabled\"\n")
		}
		if len(a.Users) > 0 {
			b.WriteString("    users = [\n")
			for _, u := range a.Users {
				writeUser(&b, u)
			}
			b.WriteString("    ]\n")
		}
		if len(a.Exports) > 0 {
			b.WriteString("    exports = [\n")
			for _, e := range a.Exports {
				kind := "stream"
				if e.Service {
					kind = "service"
				}
				b.WriteString("      { " + kind + " = " + quote(e.Subject))
				if e.Streamed {
					b.WriteString(", response_type = \"stream\"")
				}
				b.WriteString(", accounts = [")
				for j, n := range e.Accounts {
					if j > 0 {
						b.WriteString(", ")
					}
					b.WriteString(quote(n))
				}
				b.WriteString("] }\n")
			}
			b.WriteString("    ]\n")
		}
		if len(a.Imports) > 0 {
			b.WriteString("    imports = [\n")
			for _, im := range a.Imports {
				kind := "stream"
				if im.Service {
					kind = "service"
				}
				b.WriteString("      { " + kind + " = { account = " + quote(im.Account) + ", subject = " + quote(im.Subject) + " } }\n")
			}
			b.WriteString("    ]\n")
		}
		b.WriteString("  }\n")
	}
	b.WriteString("}\n")
	return b.String(), nil
}

func writeUser(b *strings.Builder, g Grant) {
	b.WriteString("      {\n        nkey = " + quote(g.PublicKey) + "\n")
	if p := g.Permissions(); p != nil {
		b.WriteString("        permissions = {\n")
		if g.Reply {
			fmt.Fprintf(b, "          allow_responses = { max = %d, expires = %s }\n",
				p.Response.MaxMsgs, quote(p.Response.Expires.String()))
		} else {
			writeSubjectPermission(b, "publish", p.Publish)
		}
		writeSubjectPermission(b, "subscribe", p.Subscribe)
		b.WriteString("        }\n")
	}
	b.WriteString("      }\n")
}

func writeSubjectPermission(b *strings.Builder, key string, p *server.SubjectPermission) {
	b.WriteString("          " + key + " = {")
	for _, part := range []struct {
		name string
		list []string
	}{{"allow", p.Allow}, {"deny", p.Deny}} {
		if len(part.list) == 0 {
			continue
		}
		b.WriteString(" " + part.name + " = [")
		for i, s := range part.list {
			if i > 0 {
				b.WriteString(",")
			}
			b.WriteString("\n            " + quote(s))
		}
		b.WriteString("\n          ]")
	}
	b.WriteString(" }\n")
}

// quote renders a string as a double-quoted nats-server configuration
// string. Configured names and subjects are plain ASCII; anything else is
// escaped as \xXX so that the text always parses to the same bytes.
func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c >= 0x7f:
			b.WriteString(`\x` + strconv.FormatUint(uint64(c)|0x100, 16)[1:])
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}
