//go:build !unix

package cputime

import "time"

// Self is 0 here: there is no getrusage.
func Self() time.Duration { return 0 }

// Of finds nothing here: there is no /proc.
func Of(comm string) (time.Duration, bool) { return 0, false }
