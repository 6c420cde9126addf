//go:build !unix

package bench

import "time"

// CPUTime is 0 where the platform does not say.
func CPUTime() time.Duration { return 0 }
