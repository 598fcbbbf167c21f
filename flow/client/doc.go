// Package client is a typed Go HTTP client for the flow task service
// (docs/flow-api.md): one method per endpoint, context first, errors typed so
// callers can branch on them (ErrStaleLease for a 409, *APIError otherwise).
//
// A Client can talk to several flow servers that share one database. It picks
// one per call, marks a server that cannot be reached as unhealthy, retries
// the call on another server when that is safe (the call is idempotent, or
// the request never left this process), and re-probes unhealthy servers in
// the background until they answer again.
package client
