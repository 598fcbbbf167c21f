// Package redislock is Asyncflow's Redis lock around hold_tasks (redsync),
// offered as a store.Locker for databases without SKIP LOCKED and to measure
// against it. The lock only makes holds take turns: the claim still checks
// status = pending when it updates, so a lock that expired mid-claim cannot
// give a task to two workers.
package redislock
