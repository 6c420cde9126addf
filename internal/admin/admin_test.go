package admin

import (
	"errors"
	"fmt"
	"testing"

	"go.uber.org/goleak"

	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/metrics"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages"
	"github.com/portcullis/portcullis/stages/reconciliation"
	"github.com/portcullis/portcullis/subjects"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestNormalizeFingerprint(t *testing.T) {
	hex := "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for in, ok := range map[string]bool{
		"sha256:" + hex: true, hex: true, " SHA256:" + hex + " ": true, "ABCDEF" + hex[6:]: true,
		hex[:63]: false, "sha256:" + hex + "0": false, "md5:" + hex: false, "": false,
	} {
		got, valid := NormalizeFingerprint(in)
		if valid != ok || (ok && !schema.ValidFingerprint(got)) {
			t.Errorf("%q → %q %v", in, got, valid)
		}
	}
}

func TestErrorIs(t *testing.T) {
	err := fmt.Errorf("wrapped: %w", &Error{Code: CodeNotIndeterminate, Message: "m"})
	if !errors.Is(err, ErrNotIndeterminate) || errors.Is(err, ErrNotFound) {
		t.Error("errors.Is does not match codes")
	}
}

// FuzzRequests: any request body gets exactly one well-formed reply, a
// result or a closed error code, and never panics the server.
func FuzzRequests(f *testing.F) {
	st, err := kv.Open(f.TempDir(), kv.Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { st.Close() })
	rec := &reconciliation.Stage{Store: st, Subjects: subjects.Default(), Clock: stages.SystemClock{}, Metrics: metrics.New(nil), MaxAttempts: 3}
	s := &Server{Store: st, Reconciliation: rec, Subjects: subjects.Default(), Clock: stages.SystemClock{}}
	fp := "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, seed := range []string{
		`{}`, ``, `{"fingerprint":"` + fp + `"}`,
		`{"fingerprint":"` + fp + `","effect":"present","evidence_ref":"ticket:1"}`,
		`{"fingerprint":"` + fp + `","effect":"absent","evidence_ref":"no colon"}`,
		`{"fingerprint":"` + fp + `","fingerprint":"` + fp + `"}`,
		`{"effect":"maybe"}`, `[1]`, `null`, `"x"`, `{"fingerprint":1}`,
	} {
		f.Add([]byte(seed))
		f.Add([]byte(seed[:len(seed)/2]))
		f.Add([]byte(seed[len(seed)/2:]))
	}
	codes := map[string]bool{CodeBadRequest: true, CodeNotFound: true, CodeNotIndeterminate: true}
	check := func(t *testing.T, verb string, out []byte, r answerProbe) {
		if err := schema.Decode(out, r); err != nil {
			t.Fatalf("%s: reply does not decode: %v: %s", verb, err, out)
		}
		if r.result() == (r.err() != nil) {
			t.Fatalf("%s: reply has both or neither: %s", verb, out)
		}
		if e := r.err(); e != nil && !codes[e.Code] {
			t.Fatalf("%s: unexpected code %s", verb, e.Code)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		check(t, "receipts", s.receipts(data), &probe[Receipts]{})
		check(t, "list", s.list(data), &probe[List]{})
		check(t, "resolve", s.resolve(data), &probe[Resolved]{})
	})
}

// answerProbe reads a decoded reply of any result type.
type answerProbe interface {
	result() bool
	err() *Error
}

type probe[T any] reply[T]

func (p *probe[T]) result() bool { return p.Result != nil }
func (p *probe[T]) err() *Error  { return p.Error }
