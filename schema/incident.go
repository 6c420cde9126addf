package schema

// Incident is the bounded, value-free record of one failure (SPEC §2.5). It
// has exactly three fields; nothing else may be added.
type Incident struct {
	Phase            Phase    `json:"phase"`
	Code             Code     `json:"code"`
	DispatchBoundary Boundary `json:"dispatch_boundary"`
}

// IncidentEvent is an Incident published alone on `<prefix>.incidents.<phase>`.
type IncidentEvent struct {
	Phase            Phase    `json:"phase"`
	Code             Code     `json:"code"`
	DispatchBoundary Boundary `json:"dispatch_boundary"`
	AtMs             int64    `json:"at_ms"`
}

// NewIncident builds an incident for a code in a phase with the boundary the
// code table gives. It panics on a code outside the closed table: that is a
// programming error, and tests cover every emitter.
func NewIncident(phase Phase, code Code) Incident {
	info, ok := LookupCode(phase, code)
	if !ok {
		panic("schema: code " + string(code) + " is not in phase " + string(phase))
	}
	return Incident{Phase: phase, Code: code, DispatchBoundary: info.Boundary}
}

// Event stamps an incident with its time.
func (i Incident) Event(atMs int64) IncidentEvent {
	return IncidentEvent{Phase: i.Phase, Code: i.Code, DispatchBoundary: i.DispatchBoundary, AtMs: atMs}
}
