// Package worker is the flow worker SDK: register a handler per (task type,
// stage), call Run, and the worker pulls tasks from the flow servers, runs
// each stage on a bounded pool and reports the outcome.
//
// A handler runs one stage of one task and returns what comes next: Next
// hands the task to another stage with a new context, Done ends it with
// success, Fail ends it as failed, and an error asks the server to retry the
// same stage later with its backoff (retry_interval doubling up to
// max_retry_interval, until max_retry_num).
//
// The worker pulls each task type every schedule_interval (with jitter), as a
// long-poll so a task that becomes due is picked up at once; it stops pulling
// while its local backlog (tasks held and not yet reported) is at MaxBacklog;
// it renews the lease of every held task at a third of the lease so long
// stages and queued tasks are not taken away; it batches outcomes that finish
// together into one set_tasks call, with two such calls in flight at most.
// On Stop (or when Run's context ends) it stops pulling, lets running
// handlers finish, hands back the tasks it held but had not started
// (pending, same stage, no delay) and reports everything before Run
// returns.
package worker
