// Package health runs the gateway's active health checks: a GET of a path
// on every target at an interval, with Dubbo-style consecutive thresholds — a healthy
// target turns unhealthy after unhealthy_threshold failures in a row, an
// unhealthy one healthy again after healthy_threshold successes in a row.
// Verdict changes are handed to a callback (the gateway's balancer, where
// turning healthy restarts warm-up).
package health
