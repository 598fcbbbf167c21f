// Package poolbench compares package pool with goroutine-pool peers (ants,
// pond, tunny, gammazero/workerpool) on the same shapes. It holds only
// benchmarks; `go run ./cmd/ratios` in the bench module prints the ratios.
package poolbench
