// Package balancebench compares package balance with load-balancing peers
// (smallnest/weighted, buraksezer/consistent, stathat consistent,
// serialx/hashring, go-zero core/hash, dgryski/go-maglev, kratos p2c) on
// the same shapes: 3, 100 and 1000 targets, serial and parallel. It holds
// only benchmarks; `go run ./cmd/ratios` in the bench module prints ratios.
package balancebench
