package adapters_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/nats-io/nats.go"

	"github.com/portcullis/portcullis/internal/adapters"
	"github.com/portcullis/portcullis/schema"
)

const (
	plantedPayload = "PLANTED-PAYLOAD-7c1e9f"
	plantedValue   = "PLANTED-VALUE-4d2a08"
)

// plantedReq carries unique strings in its payload and protected values.
func plantedReq(provider string) schema.DispatchRequest {
	req := dispatchReq(provider, "privacy")
	req.Payload = jsontext.Value(`{"note":"` + plantedPayload + `"}`)
	req.ProtectedDisclosure = &schema.DispatchDisclosure{
		Recipient: "Duffel", Purpose: "Create the order.", FieldClasses: []string{"legal_identity"},
		Values: map[string]jsontext.Value{"legal_identity": jsontext.Value(`{"given_name":"` + plantedValue + `","family_name":"X"}`)},
	}
	return req
}

func assertClean(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error; the failure path did not happen", what)
		return
	}
	for _, text := range []string{err.Error(), fmt.Sprintf("%+v", err), fmt.Sprintf("%#v", err)} {
		for _, planted := range []string{plantedPayload, plantedValue} {
			if strings.Contains(text, planted) {
				t.Errorf("%s: error text carries a planted string: %s", what, text)
			}
		}
	}
}

// echo answers with the request body plus the planted strings in every
// place a careless adapter might copy into an error: member names, values,
// headers, a redirect location.
func echo(body []byte) string {
	return `{"outcome":"confirmed","` + plantedValue + `":` + string(body) + `}`
}

// TestPrivacy drives every failure path of every adapter with planted
// payload and protected values and checks that no error text carries them.
func TestPrivacy(t *testing.T) {
	req := plantedReq("inventory")
	for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
		if s := fmt.Sprintf(verb, req.ProtectedDisclosure); strings.Contains(s, plantedValue) {
			t.Errorf("formatting the disclosure with %s prints values: %s", verb, s)
		}
	}

	t.Run("nats", func(t *testing.T) {
		f := newNATSFixture(t, "", 300*time.Millisecond)
		a := f.adapter
		_, err := a.Dispatch(t.Context(), req)
		assertClean(t, "no responders", err)

		mode := make(chan string, 1)
		release := make(chan struct{})
		t.Cleanup(func() { close(release) })
		f.respond(t, "actions.provider.inventory.dispatch", func(m *nats.Msg) []byte {
			switch <-mode {
			case "echo":
				return []byte(echo(m.Data))
			case "name":
				return []byte(`{"` + plantedValue + `":1}`)
			case "invalid":
				return []byte(`{"outcome":"confirmed","evidence_refs":["` + plantedPayload + `"]}`)
			case "big":
				return []byte(`{"outcome":"` + strings.Repeat(plantedValue, adapters.MaxReplyBytes/len(plantedValue)+1) + `"}`)
			}
			<-release
			return nil
		})
		for _, m := range []string{"echo", "name", "invalid", "big", "silent"} {
			mode <- m
			_, err := a.Dispatch(t.Context(), req)
			assertClean(t, "nats "+m, err)
		}

		bad := plantedReq("other")
		_, err = a.Dispatch(t.Context(), bad)
		assertClean(t, "invalid request", err)
		big := plantedReq("inventory")
		big.Payload = jsontext.Value(`"` + strings.Repeat(plantedPayload, (2<<20)/len(plantedPayload)) + `"`)
		_, err = a.Dispatch(t.Context(), big)
		assertClean(t, "max payload", err)
		unencodable := plantedReq("inventory")
		unencodable.Payload = jsontext.Value(`{"` + plantedPayload + `":`)
		_, err = a.Dispatch(t.Context(), unencodable)
		assertClean(t, "unencodable", err)
		f.nc.Close()
		_, err = a.Dispatch(t.Context(), req)
		assertClean(t, "closed", err)
	})

	t.Run("http", func(t *testing.T) {
		handler := func(status int) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				w.Header().Set("X-Echo", plantedValue)
				switch status {
				case 0: // hang up after reading
					conn, _, err := w.(http.Hijacker).Hijack()
					if err == nil {
						conn.Close()
					}
				case 1: // too slow
					<-r.Context().Done()
				case 302:
					http.Redirect(w, r, "http://127.0.0.1:1/"+plantedPayload, status)
				default:
					reply(w, status, echo(body))
				}
			}
		}
		for _, status := range []int{0, 1, 200, 302, 400, 422, 500, 503} {
			c := newConnector(t, handler(status))
			_, err := newHTTP(t, c.URL, 300*time.Millisecond).Dispatch(t.Context(), req)
			assertClean(t, fmt.Sprintf("http %d", status), err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		_, err = newHTTP(t, "http://"+addr, time.Second).Dispatch(t.Context(), req)
		assertClean(t, "refused", err)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		_, err = newHTTP(t, "http://"+addr, time.Second).Dispatch(ctx, req)
		assertClean(t, "done context", err)
	})

	t.Run("fake", func(t *testing.T) {
		fake := adapters.NewFake("inventory", adapters.FakeScript{})
		for _, r := range []schema.AdapterReply{
			{Outcome: plantedValue},
			{Outcome: "confirmed", EvidenceRefs: []string{plantedPayload}},
			{Outcome: "confirmed", ProviderActionID: plantedValue + "\n"},
			{Outcome: "rejected", ErrorCode: plantedValue + " x"},
		} {
			fake.OnDispatch(func(context.Context, schema.DispatchRequest) (schema.AdapterReply, error) { return r, nil })
			_, err := fake.Dispatch(t.Context(), req)
			assertClean(t, "fake malformed", err)
		}
		_, err := fake.Dispatch(t.Context(), plantedReq("other"))
		assertClean(t, "fake invalid request", err)
	})
}
