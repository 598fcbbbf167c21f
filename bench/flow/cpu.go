package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// On two shared cores tasks/s moves by a tenth between rounds; the CPU a
// task costs moves far less, and says where the time goes: in this
// process (HTTP, JSON, the SDK, the drivers, River's client, SQLite) or in
// the database server.

// cpuMark is the CPU used so far by this process and by the database
// server's processes.
type cpuMark struct{ self, db time.Duration }

// markCPU reads both; dbComm is the server's process name ("" for none,
// SQLite running in this process).
func markCPU(dbComm string) cpuMark {
	m := cpuMark{self: selfCPU()}
	if dbComm != "" {
		m.db = procCPU(dbComm)
	}
	return m
}

// perTask is the CPU since from, per task, in µs.
func (m cpuMark) perTask(from cpuMark, n int) (self, db float64) {
	return float64(m.self-from.self) / float64(n) / 1e3, float64(m.db-from.db) / float64(n) / 1e3
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procCPU sums the CPU time of the local processes named comm from /proc
// (a PostgreSQL server's backends are each a process; the benchmark's
// stay connected until its figures are read).
func procCPU(comm string) time.Duration {
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
	}
	return time.Duration(ticks) * 10 * time.Millisecond // USER_HZ is 100 on Linux
}
