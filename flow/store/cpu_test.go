package store_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// On a shared 2-core machine throughput swings with the neighbours' load;
// CPU time spent per task does not, so the cycle benchmark reports both.

// selfCPU is this process's user+system CPU time.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procCPU sums the CPU time of local processes named comm (e.g. postgres,
// mariadbd) from /proc; ok is false where that cannot be read.
func procCPU(comm string) (d time.Duration, ok bool) {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var ticks int64
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		s := string(b)
		open, close := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || close < open || s[open+1:close] != comm {
			continue
		}
		f := strings.Fields(s[close+2:])
		if len(f) < 13 {
			continue
		}
		u, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		ticks += u + st
		ok = true
	}
	return time.Duration(ticks) * 10 * time.Millisecond, ok // USER_HZ is 100 on Linux
}
