// Package natsauth is the NATS permission table of SPEC §2.8, declared once
// as data (Table) and rendered twice: as nkey users for the embedded server
// (Users) and as nats-server configuration text for an external deployment
// (AuthorizationBlock). Both renderings grant exactly the same.
//
// What the table relies on, each checked against a real nats-server in this
// package's tests:
//
//   - A publish allow list that is present but empty denies every publish.
//     A response permission admits, beside it, one reply per received
//     request within the server's default window (ResponsePermission with
//     zero fields, or `allow_responses = true`, makes the server fill in the
//     allow list itself; Users sets it explicitly so that nothing depends on
//     that normalization).
//   - No client role may create consumers: a consumer's deliver subject
//     escapes publish permissions. History is read by direct get only.
//   - A host may direct-get only on subjects under its own outcome subjects;
//     the server answers a request body that names a sequence or another
//     subject on that endpoint with 408 and no message.
//   - Every identity that makes requests receives replies only under its
//     own inbox prefix _INBOX.<public key> (subjects.Inbox).
//
// What per-user permissions in one account cannot stop: the reply subject
// of a permitted publish or request is checked against nothing, and the
// server publishes its answer there (a JetStream PubAck, a direct-get
// response). A host or an operator can so place server-made messages on
// any subject of the account, where streams capture them: another host's
// outcome subject, internal subjects, the activity bucket. The HMAC on
// internal messages (SPEC §2.8, defence in depth) catches them there;
// elsewhere only account isolation would (TestKnownHoleReplySubjectInjection).
package natsauth

import (
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

// Grant is one identity's row of the permission table.
type Grant struct {
	// Kind is a config block kind (config.KindHost, …) or KindProcessor.
	Kind string
	// Name is the block's label; "" for the processor.
	Name string
	// PublicKey is the identity's nkey (U…), the user it logs in as.
	PublicKey string
	// Full: no restriction at all (the processor itself).
	Full bool
	// Publish lists the subjects it may publish on; empty: none.
	Publish []string
	// Subscribe lists the subjects it may subscribe to.
	Subscribe []string
	// Reply: it may also publish one reply to each request it received,
	// within the server's default window (two minutes), and nothing else.
	Reply bool
}

// Table is the permission table of SPEC §2.8 for a configuration: the
// processor's own identity (public key processorKey, full rights) first,
// then every configured role in the order of cfg.Roles().
func Table(cfg *config.Config, subj subjects.Subjects, processorKey string) []Grant {
	out := []Grant{{Kind: KindProcessor, PublicKey: processorKey, Full: true}}
	inbox := func(key string) string { return subjects.Inbox(key) + ".>" }
	for _, r := range cfg.Roles() {
		g := Grant{Kind: r.Kind, Name: r.Name, PublicKey: r.PublicKey}
		switch r.Kind {
		case config.KindHost:
			// History: direct gets of the last message of one of its own
			// outcome subjects, and nothing else of any stream.
			g.Publish = []string{
				subj.Proposal(r.Name),
				subj.Grant(r.Name),
				subjects.DirectGetLast(subj.OutcomesStream(), subj.HostOutcomes(r.Name)),
			}
			g.Subscribe = []string{subj.HostOutcomes(r.Name), inbox(r.PublicKey)}
		case config.KindConnector:
			for _, c := range cfg.Connectors {
				if c.Name != r.Name {
					continue
				}
				for _, p := range c.Providers {
					g.Subscribe = append(g.Subscribe, subj.ProviderDispatch(p), subj.ProviderReconcile(p))
				}
			}
			g.Reply = true
		case config.KindResolver:
			g.Subscribe = []string{subj.DisclosureResolve()}
			g.Reply = true
		case config.KindSource:
			g.Subscribe = []string{subj.Candidates(r.Name)}
			g.Reply = true
		case config.KindOperator:
			g.Publish = []string{subj.Admins()}
			// Stream info and every form of direct get (by sequence, last
			// for a subject, next for a filter) on the two public streams
			// and the bucket's stream: reading, never writing or consuming.
			for _, stream := range []string{subj.OutcomesStream(), subj.IncidentsStream(), "KV_" + subj.ActivityBucket()} {
				g.Publish = append(g.Publish,
					"$JS.API.STREAM.INFO."+stream,
					"$JS.API.DIRECT.GET."+stream,
					"$JS.API.DIRECT.GET."+stream+".>",
				)
			}
			g.Subscribe = []string{subj.Outcomes(), subj.Incidents(), inbox(r.PublicKey)}
		default:
			// A kind this table does not know gets nothing: it cannot log in.
			continue
		}
		out = append(out, g)
	}
	return out
}

// Permissions renders a grant as the embedded server's permissions; nil
// for full rights.
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

// Users renders the table as the embedded server's nkey users: one per
// configured role, plus the processor's own identity with full rights.
func Users(cfg *config.Config, subj subjects.Subjects, processorKey string) []*server.NkeyUser {
	var out []*server.NkeyUser
	for _, g := range Table(cfg, subj, processorKey) {
		out = append(out, &server.NkeyUser{Nkey: g.PublicKey, Permissions: g.Permissions()})
	}
	return out
}

// AuthorizationBlock renders the table as nats-server configuration text,
// an `authorization { users = [ … ] }` block that grants exactly what Users
// does, for each server of an external deployment.
func AuthorizationBlock(cfg *config.Config, subj subjects.Subjects, processorKey string) string {
	var b strings.Builder
	b.WriteString("# Portcullis NATS permissions (SPEC §2.8), subject prefix " + quote(subj.Prefix()) + ".\n")
	b.WriteString("# Generated by `processor nats-permissions`: regenerate it whenever roles change.\n")
	b.WriteString("# Every client logs in with its nkey. A user without `permissions` has full\n")
	b.WriteString("# rights: only the processor's own. `allow_responses` also forbids every other\n")
	b.WriteString("# publish; keep it with the role it belongs to.\n")
	b.WriteString("authorization {\n  users = [\n")
	for _, g := range Table(cfg, subj, processorKey) {
		if g.Kind == KindProcessor {
			b.WriteString("    # the Portcullis processor: streams, consumers, internal subjects\n")
		} else {
			b.WriteString("    # " + g.Kind + " " + quote(g.Name) + "\n")
		}
		b.WriteString("    {\n      nkey = " + quote(g.PublicKey) + "\n")
		if p := g.Permissions(); p != nil {
			b.WriteString("      permissions = {\n")
			if g.Reply {
				fmt.Fprintf(&b, "        allow_responses = { max = %d, expires = %s }\n",
					p.Response.MaxMsgs, quote(p.Response.Expires.String()))
			} else {
				writeSubjectPermission(&b, "publish", p.Publish)
			}
			writeSubjectPermission(&b, "subscribe", p.Subscribe)
			b.WriteString("      }\n")
		}
		b.WriteString("    }\n")
	}
	b.WriteString("  ]\n}\n")
	return b.String()
}

func writeSubjectPermission(b *strings.Builder, key string, p *server.SubjectPermission) {
	b.WriteString("        " + key + " = {")
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
			b.WriteString("\n          " + quote(s))
		}
		b.WriteString("\n        ]")
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
