// Package sim simulates live rooms for demos and tests of the supervisor, so
// no outside service is needed. Each room streams messages over Server-Sent
// Events; every watcher of a room gets the same messages with the same ids,
// as redundant workers watching one real room would, and a heartbeat at least
// every heartbeat interval (default 10 s, under the supervisor's 30 s task
// timeout). GET /rooms lists the rooms in the task-list format of the
// supervisor's http source.
//
// Watch is the client side: it reads one room's stream.
package sim
