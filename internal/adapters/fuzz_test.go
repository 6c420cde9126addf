package adapters_test

import (
	"reflect"
	"testing"

	"github.com/portcullis/portcullis/internal/adapters"
	"github.com/portcullis/portcullis/schema"
)

var replySeeds = []string{
	`{"outcome":"confirmed"}`,
	`{"outcome":"acknowledged","provider_action_id":"ord_1","evidence_refs":["prov:1","prov:2"],"error_code":"E.1:x-y_z"}`,
	`{"outcome":"rejected","error_code":"CARD_DECLINED","evidence_refs":[]}`,
	`{"outcome":"failed_before_dispatch","provider_action_id":null}`,
	`{"outcome":"indeterminate","evidence_refs":["a:\u00e9\u2028"]}`,
	`{"outcome":"confirmed","outcome":"rejected"}`,
	`{"outcome":"confirmed","x":{"y":[1,2,{"z":null}]}}`,
	`[{"outcome":"confirmed"}]`,
	`{"outcome":"confirmed"} trailing`,
	"{\"outcome\":\"confirmed\",\"provider_action_id\":\"\xff\"}",
	`{"stream":"S","seq":1}`,
	``,
}

// FuzzDecodeReply: no input panics or hangs; whatever is accepted is a
// valid reply and survives a round trip unchanged.
func FuzzDecodeReply(f *testing.F) {
	for _, s := range replySeeds {
		for _, reconcile := range []bool{false, true} {
			f.Add([]byte(s), reconcile)
			f.Add([]byte(s[:len(s)/2]), reconcile)
			f.Add([]byte(s[len(s)/2:]), reconcile)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte, reconcile bool) {
		r, err := adapters.DecodeReply(data, reconcile)
		if err != nil {
			if class(err) != "malformed" {
				t.Fatalf("error of class %s: %v", class(err), err)
			}
			return
		}
		if !r.Valid(reconcile) {
			t.Fatalf("accepted an invalid reply %+v", r)
		}
		again, err := adapters.DecodeReply(schema.MustMarshal(r), reconcile)
		if err != nil || !reflect.DeepEqual(normalize(again), normalize(r)) {
			t.Fatalf("round trip: %+v vs %+v (%v)", again, r, err)
		}
	})
}

// normalize treats an empty evidence list like an absent one (omitempty).
func normalize(r schema.AdapterReply) schema.AdapterReply {
	if len(r.EvidenceRefs) == 0 {
		r.EvidenceRefs = nil
	}
	return r
}
