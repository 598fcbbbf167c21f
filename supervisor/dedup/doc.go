// Package dedup remembers which payloads the supervisor has already
// published, so that the k redundant workers of one task produce each message
// once downstream.
//
// A payload is known by its task and message id, or, when the worker gave no
// message id, by its task and a hash of its content. The first sighting within
// the window wins; later sightings of the same key inside the window are
// duplicates. Memory is bounded: past maxEntries the oldest keys are forgotten
// first, so a flood of distinct messages can shorten the effective window but
// never grow the process.
package dedup
