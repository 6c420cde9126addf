// Package natsauth builds the NATS users of SPEC §2.8. (Stand-in until the
// auth branch merges: every configured role gets full permissions.)
package natsauth

import (
	"github.com/nats-io/nats-server/v2/server"

	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/subjects"
)

// Users returns the embedded server's nkey users.
func Users(cfg *config.Config, subj subjects.Subjects, processorKey string) []*server.NkeyUser {
	out := []*server.NkeyUser{{Nkey: processorKey}}
	for _, r := range cfg.Roles() {
		out = append(out, &server.NkeyUser{Nkey: r.PublicKey})
	}
	return out
}
