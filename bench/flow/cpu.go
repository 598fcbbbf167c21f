package main

import (
	"time"

	"github.com/fulcrum-lb/fulcrum/internal/cputime"
)

// On two shared cores tasks/s moves by up to a third between rounds; the
// CPU a task costs moves less, and says where the time goes: in this
// process (HTTP, JSON, the SDK, the drivers, River's client, SQLite) or in
// the database server.

// cpuMark is the CPU used so far by this process and by the database
// server's processes.
type cpuMark struct {
	self, db time.Duration
	dbOK     bool // the server's processes were found
}

// markCPU reads both; dbComm is the server's process name ("" for none,
// SQLite running in this process).
func markCPU(dbComm string) cpuMark {
	m := cpuMark{self: cputime.Self()}
	if dbComm != "" {
		m.db, m.dbOK = cputime.Of(dbComm)
	}
	return m
}

// perTask is the CPU since from, per task, in µs; db is -1 when the
// server's processes were not found (SQLite; a remote server; another
// process name).
func (m cpuMark) perTask(from cpuMark, n int) (self, db float64) {
	self, db = float64(m.self-from.self)/float64(n)/1e3, -1
	if m.dbOK && from.dbOK {
		db = float64(m.db-from.db) / float64(n) / 1e3
	}
	return self, db
}
