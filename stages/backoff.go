package stages

import "time"

// Backoff is the wait before try n (n ≥ 1) of something that doubles from
// base, at most max: base·2^(n-1). The runner's redeliveries, dispatch's
// retries of a provider nobody answered, and reconciliation's polls all
// use it.
func Backoff(base, max time.Duration, n int) time.Duration {
	d := base
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	return min(d, max)
}
