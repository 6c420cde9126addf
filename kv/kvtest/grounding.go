package kvtest

import (
	"testing"

	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/schema"
)

// OpenGroundings opens fresh checkpoints and returns them with a function
// that opens them again over the same storage (a restart: a redelivery
// after a crash must find what was put).
type OpenGroundings func(t *testing.T) (s kv.Groundings, reopen func() kv.Groundings)

// RunGroundings is the conformance suite every kv.Groundings backend
// passes.
func RunGroundings(t *testing.T, open OpenGroundings) {
	key := kv.GroundingKey("ACTIONS_GROUNDING", 7, []byte("body"))
	want := kv.Grounding{Referent: "svc:payments-prod", ObservationRef: "catalog:9", AtMs: 5}

	t.Run("put and read", func(t *testing.T) {
		s, reopen := open(t)
		if _, found, err := s.Grounding(key); found || err != nil {
			t.Fatalf("empty: found=%v err=%v", found, err)
		}
		if err := s.PutGrounding(key, want); err != nil {
			t.Fatal(err)
		}
		if got, found, err := s.Grounding(key); !found || err != nil || got != want {
			t.Fatalf("got %+v %v %v", got, found, err)
		}
		// Another sequence, stream or body is another input.
		for _, other := range [][]byte{
			kv.GroundingKey("ACTIONS_GROUNDING", 8, []byte("body")),
			kv.GroundingKey("OTHER_GROUNDING", 7, []byte("body")),
			kv.GroundingKey("ACTIONS_GROUNDING", 7, []byte("body2")),
		} {
			if _, found, err := s.Grounding(other); found || err != nil {
				t.Fatalf("a checkpoint found under another input's key: %v %v", found, err)
			}
		}
		// A failure is kept as its code, and survives a restart.
		failed := kv.GroundingKey("ACTIONS_GROUNDING", 9, []byte("body"))
		if err := s.PutGrounding(failed, kv.Grounding{Code: schema.CodeGroundingSourceUnavailable, AtMs: 6}); err != nil {
			t.Fatal(err)
		}
		r := reopen()
		if got, found, err := r.Grounding(key); !found || err != nil || got != want {
			t.Fatalf("after a restart: %+v %v %v", got, found, err)
		}
		if got, found, err := r.Grounding(failed); !found || err != nil || got.Code != schema.CodeGroundingSourceUnavailable || got.Referent != "" {
			t.Fatalf("a failure after a restart: %+v %v %v", got, found, err)
		}
	})

	t.Run("lock", func(t *testing.T) {
		s, _ := open(t)
		LockExcludes(t, s.Lock, string(key), string(kv.GroundingKey("ACTIONS_GROUNDING", 8, []byte("body"))))
	})
}
