//go:build unix

// Package cputime reads CPU time used so far, by this process and by other
// local processes, for benchmarks that report CPU per operation: on a
// shared machine throughput swings with the neighbours' load, CPU time
// per operation far less.
package cputime

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Self is this process's user and system CPU time.
func Self() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Of sums the user and system CPU time of the local processes named comm
// (postgres, mariadbd) from /proc; ok is false when none could be read.
// A PostgreSQL server's backends are processes of their own, so a
// benchmark reads this while its connections are still open. Without
// /proc (macOS) ok is false.
func Of(comm string) (d time.Duration, ok bool) {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var ticks int64
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		s := string(b)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open || s[open+1:end] != comm {
			continue
		}
		f := strings.Fields(s[end+2:])
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
