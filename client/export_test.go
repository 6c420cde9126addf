package client

// Test hooks.

// OnServed calls f after each request a server handled (reply sent, values
// wiped).
func (c *Connector) OnServed(f func())       { c.srv.served.Store(&f) }
func (r *Resolver) OnServed(f func())        { r.srv.served.Store(&f) }
func (s *CandidateSource) OnServed(f func()) { s.srv.served.Store(&f) }

// Polls is how many direct gets the tracker made.
func (t *Tracker) Polls() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.polls
}
