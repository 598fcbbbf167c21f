// Package assign benchmarks the supervisor's assignment engine
// (supervisor.Engine) against what a team would hand-roll for the same job:
// consistent hashing with bounded loads (buraksezer/consistent), each task
// on its partition's owner and the next k-1 members around the ring. Same
// 100,000 tasks, k = 3, 1,000 members; measured: the time and memory of the
// full assignment, of the reassignment after one member dies, and how many
// holdings move when it does.
package assign
