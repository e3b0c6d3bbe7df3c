//go:build unix

package limiter_test

import (
	"syscall"
	"time"
)

// processCPU is the CPU time the process has used (user + system, all
// threads). The benchmarks report it per op beside ns/op, because on a
// machine shared with other work wall time also counts the time the
// benchmark waited for a core.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
