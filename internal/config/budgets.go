package config

import "fmt"

// EnvelopeAllowance is what a stage's hand-off may carry beyond the
// proposal's body: the envelope's own fields (grounding, authorization)
// and its headers. A hand-off is at most max_payload_bytes plus it.
const EnvelopeAllowance = 8 << 10

// BudgetWarnings says, with the numbers, where the hosts' budgets do not
// fit the streams they share (SPEC §2.8 Budgets): a configuration that
// loads and runs, but in which one host can still spend what another
// needs — each host's proposals inside the pipeline, at their largest,
// beyond stage_max_bytes (a stage stream can fill and every host's
// hand-offs wait), or the hosts' history shares beyond history_max_bytes
// (the oldest of any host's history can then go). processor validate
// prints them; processor run logs them at start. With unsigned input
// allowed (local development) the hosts share everything: none.
func (c *Config) BudgetWarnings() []string {
	if c.Admission.AllowUnsigned || len(c.Hosts) == 0 {
		return nil
	}
	var out []string
	s := c.Streams
	hosts := int64(len(c.Hosts))
	largest := int64(c.Admission.MaxPayloadBytes) + EnvelopeAllowance
	if pipeline := hosts * s.HostPipelineMaxMsgs * largest; pipeline > s.StageMaxBytes {
		out = append(out, fmt.Sprintf("streams.stage_max_bytes %s is less than the hosts' proposals inside the pipeline can take: %d hosts × host_pipeline_max_msgs %d × up to %s each (admission.max_payload_bytes + %s) = %s; a stage stream can fill, and every host's hand-offs then wait for room (lower host_pipeline_max_msgs or max_payload_bytes, or raise stage_max_bytes)",
			Bytes(s.StageMaxBytes), hosts, s.HostPipelineMaxMsgs, Bytes(largest), Bytes(EnvelopeAllowance), Bytes(pipeline)))
	}
	// One share more than the hosts: the events of input that names no
	// configured host. The shares must fit fifteen sixteenths: the rest is
	// room for what a host writes while its share is being trimmed.
	if history := (hosts + 1) * s.HostHistoryMaxBytes; history > s.HistoryMaxBytes/16*15 {
		out = append(out, fmt.Sprintf("streams.history_max_bytes %s is less than the hosts' history shares need: (%d hosts + 1 for input that names none) × host_history_max_bytes %s = %s, which must fit 15/16 of it (the rest is room for what a host writes while its share is trimmed); the outcomes, incidents and activity of one host can then push out another's oldest (lower host_history_max_bytes or raise history_max_bytes)",
			Bytes(s.HistoryMaxBytes), hosts, Bytes(s.HostHistoryMaxBytes), Bytes(history)))
	}
	return out
}

// Bytes writes n in the largest binary unit that divides it, as sizes are
// written in the configuration ("64MiB"), else in bytes.
func Bytes(n int64) string {
	for _, u := range []struct {
		name string
		size int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.size && n%u.size == 0 {
			return fmt.Sprintf("%d%s", n/u.size, u.name)
		}
	}
	return fmt.Sprintf("%dB", n)
}
