//go:build !unix

package bench

import "time"

// cpuTime is 0 where the platform does not say.
func cpuTime() time.Duration { return 0 }
