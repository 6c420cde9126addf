package stages

import "github.com/portcullis/portcullis/subjects"

// Route is where a stage's messages go, as the pipeline table says: a stage
// learns its own name and its successor's only from its Route, so that
// inserting or reordering stages is a change to the table alone.
type Route struct {
	Subjects subjects.Subjects
	// Self is the stage's name: its stream holds its hand-offs and timers.
	Self string
	// Next is the successor's name; "" for the last stage.
	Next string
}

// HandOff is the subject handing the proposal with token id (see
// subjects.ProposalToken) on to the next stage.
func (r Route) HandOff(id string) string {
	return r.Subjects.Stage(r.Next, subjects.KindProposal, id)
}

// NextTimer is the subject of a timer the next stage consumes (dispatch
// schedules reconciliation's first poll).
func (r Route) NextTimer(id string) string {
	return r.Subjects.Stage(r.Next, subjects.KindTimer, id)
}

// Timer is the subject of a timer the stage itself consumes.
func (r Route) Timer(id string) string {
	return r.Subjects.Stage(r.Self, subjects.KindTimer, id)
}
