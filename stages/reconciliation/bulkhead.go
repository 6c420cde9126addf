package reconciliation

import "github.com/portcullis/portcullis/stages"

// Provider names the provider a trigger would ask, from the journal, for
// the stage's bulkheads (stages.WithBulkhead): false for a trigger that
// does not decode or names an intent the journal does not hold.
func (s *Stage) Provider(in *stages.Input) (string, bool) {
	tr, err := DecodeTrigger(s.Route.Subjects, in.Subject, in.Data)
	if err != nil {
		return "", false
	}
	rec, found, err := s.Journal.Load(tr.Fingerprint)
	if err != nil || !found {
		return "", false
	}
	return rec.Provider, true
}
