package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/portcullis/portcullis/schema/keyfile"
)

// rightsProbeTimeout bounds the start's check of the login's rights: a
// refusal comes within milliseconds; a server that does not answer (a
// cluster still electing its leader) is left to the retries that follow.
const rightsProbeTimeout = 3 * time.Second

// natsErrors receives the connection's asynchronous errors. NATS tells a
// client that it was refused a publish or a subscription only this way; by
// default nats.go prints each on standard error, which is neither the
// processor's log nor one line. Before the start's check (checkRights) a
// refusal goes only to that check, which makes it the start's one error
// line; after it, every such error is logged.
type natsErrors struct {
	checked  atomic.Bool
	refusals chan error
	log      func(msg string, args ...any)
}

func newNATSErrors(log func(msg string, args ...any)) *natsErrors {
	return &natsErrors{refusals: make(chan error, 1), log: log}
}

func (e *natsErrors) option() nats.Option {
	return nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if !e.checked.Load() && errors.Is(err, nats.ErrPermissionViolation) {
			select {
			case e.refusals <- err:
			default:
			}
			return
		}
		e.log("engine: NATS reported an error on the processor's connection", "error", err)
	})
}

// checkRights asks JetStream for the account's information — what only the
// processor's own login may do — so that a login without the processor's
// rights is one line at start naming whose key it is and what was
// expected (SPEC §5), not permission errors and a timeout a minute later.
func (p *Processor) checkRights(ctx context.Context) error {
	defer p.natsErrs.checked.Store(true)
	ctx, cancel := context.WithTimeout(ctx, rightsProbeTimeout)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := p.js.AccountInfo(ctx)
		done <- err
	}()
	select {
	case err := <-done:
		if errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) {
			return p.rightsError("its account has no JetStream")
		}
		return nil // answered, or not yet: the start's retries go on
	case refused := <-p.natsErrs.refusals:
		return p.rightsError("NATS refused it: " + strings.TrimPrefix(refused.Error(), "nats: "))
	}
}

// rightsError says whose login lacks the processor's rights and what was
// expected.
func (p *Processor) rightsError(why string) error {
	n := p.cfg.NATS
	if n.Embedded {
		return fmt.Errorf("engine: the processor's own identity on the embedded server may not do what the processor does (%s)", why)
	}
	who := "an anonymous login"
	if n.Credentials != "" {
		who = "the login of nats.credentials " + n.Credentials
		if pub, err := credentialsKey(n.Credentials); err == nil {
			role := p.cfg.RoleOf(pub)
			if role == "" {
				role = "no role"
			}
			who += fmt.Sprintf(" (key %s, the key of %s in this configuration)", pub, role)
		}
	}
	return fmt.Errorf("engine: %s lacks the processor's rights (%s): nats.credentials must be the processor's own nkey user, with the permissions `processor nats-permissions --config FILE` prints for it", who, why)
}

// credentialsKey is the public key nats.credentials logs in with: a seed
// file's, or a .creds file's user seed.
func credentialsKey(path string) (string, error) {
	jwt, err := keyfile.IsCreds(path)
	if err != nil {
		return "", err
	}
	var kp nkeys.KeyPair
	if jwt {
		raw, err := os.ReadFile(path)
		if err != nil {
			return "", err
		}
		kp, err = nkeys.ParseDecoratedNKey(raw)
		if err != nil {
			return "", err
		}
	} else if kp, err = keyfile.LoadSeed(path); err != nil {
		return "", err
	}
	defer kp.Wipe()
	return kp.PublicKey()
}
