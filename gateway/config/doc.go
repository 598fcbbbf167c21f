// Package config reads and validates the gateway's YAML configuration.
//
// Parse refuses a configuration as a whole: unknown fields, malformed
// durations, sizes and URLs, unknown strategy names, bad hash_key forms and
// routes naming missing upstreams are all reported together, each error
// naming the field's path (upstreams.api.targets[0].url) and its line. A
// Config that Parse returns is complete: every default is filled in, so the
// rest of the gateway never re-checks it.
//
// Decoding is internal/confyaml's, as for every Fulcrum config: one
// decoder, one error shape ("line 7: upstreams.api.targets[0].weight:
// ..."), one Duration and Size, and a "did you mean" for unknown fields,
// strategy_settings and admin target lists included.
package config
