package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/internal/config"
	kvjs "github.com/portcullis/portcullis/kv/jetstream"
	"github.com/portcullis/portcullis/subjects"
)

// KeptEnvelopes are the envelopes each host keeps (kv.Envelopes on the
// streams StreamConfigs makes): the parked proposals' and the held
// dispatches', each host's in streams of its own (its budgets) — or, with
// unsigned input allowed, in streams every host shares — and read back
// from the streams every host shared before, while those hold any.
func KeptEnvelopes(js jetstream.JetStream, seal kvjs.EnvelopeSealer, s subjects.Subjects, c *config.Config) (parked, held *kvjs.Envelopes) {
	hosts := perHost(c)
	parked = &kvjs.Envelopes{
		JS: js, Seal: seal,
		Stream: func(h string) string {
			if hosts {
				return s.HostParkedStream(h)
			}
			return s.KeptParkedStream()
		},
		Subject: s.Parked,
		Legacy: func(h, proposalID string) (string, string) {
			return s.LegacyParkedStream(), s.LegacyParked(subjects.ProposalToken(h, proposalID))
		},
	}
	held = &kvjs.Envelopes{
		JS: js, Seal: seal,
		Stream: func(h string) string {
			if hosts {
				return s.HostHeldStream(h)
			}
			return s.KeptHeldStream()
		},
		Subject: s.Held,
		Legacy: func(_, hex string) (string, string) {
			return s.LegacyHeldStream(), s.LegacyHeld(hex)
		},
	}
	return parked, held
}

// retireLegacyKept deletes the streams in which an earlier version kept
// every host's envelopes once they hold none; until then the envelopes
// there are read (and dropped) where they are, and log (nil: none) hears
// of it.
func retireLegacyKept(ctx context.Context, js jetstream.JetStream, s subjects.Subjects, log *slog.Logger) error {
	for _, name := range []string{s.LegacyParkedStream(), s.LegacyHeldStream()} {
		err := retryJS(ctx, func(ctx context.Context) error {
			st, err := js.Stream(ctx, name)
			if errors.Is(err, jetstream.ErrStreamNotFound) {
				return nil
			}
			if err != nil {
				return err
			}
			info, err := st.Info(ctx)
			if err != nil {
				return err
			}
			if info.State.Msgs > 0 {
				if log != nil {
					log.Info("envelopes kept by an earlier version, in a stream every host shared, are read from it until it is empty", "stream", name, "envelopes", info.State.Msgs)
				}
				return nil
			}
			err = js.DeleteStream(ctx, name)
			if errors.Is(err, jetstream.ErrStreamNotFound) {
				return nil
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("engine: stream %s: %w", name, err)
		}
	}
	return nil
}
