// Package dedup benchmarks the supervisor's payload deduper
// (supervisor/dedup) against what a team would otherwise use: go-zero's
// expiring LRU cache (core/collection.Cache) driven as get-then-set, and a
// hand-rolled map of string keys behind a mutex with a FIFO for the bound.
// All are given the same window and entry bound and the same k=3 stream.
package dedup
