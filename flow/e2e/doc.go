// Package e2e holds the flow service's end-to-end tests: several real flow
// servers on one real database with many SDK workers (the stress test), and
// real processes killed with SIGKILL (the crash test). It has no non-test
// code.
package e2e
