//go:build !unix

package retention_test

import "time"

func cpuTime() time.Duration { return 0 }
