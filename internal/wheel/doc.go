// Package wheel is a low-precision hashed timer wheel: many timeouts, keyed
// by any comparable value, driven by one ticking goroutine (or by the
// caller's own loop through Advance).
//
// The supervisor runs every worker and task timeout and every poll on one
// coarse timer because precision of a tick (1 s) is plenty and a runtime timer per
// key is not free. Set (add or reset), Cancel and Len are O(1): a reset only
// rewrites the key's deadline, and the entry moves to its new slot lazily
// when the wheel next visits the old one. A timeout fires at the first tick
// at or after its deadline: never early, at most one tick late.
//
// Set returns a Handle; Reset and ResetAfter through it skip the key lookup
// (one slice index instead of a map probe). A Handle goes stale when its
// timeout fires or is cancelled, and a stale one is refused rather than
// applied to whatever key reuses the entry.
package wheel
