// Package confyaml reads a YAML configuration file into a Go struct the one
// way every Fulcrum config is read: strictly, reporting every problem at
// once, each with its field path and line.
//
// Decode walks the parsed YAML node tree beside the target value instead of
// handing the whole document to the YAML library, so that
//
//   - an unknown field is an error that suggests the nearest known name
//     ("line 3: redundncy: unknown field (did you mean redundancy?)");
//   - a time.Duration is written with a unit ("5s", "250ms"), and a plain
//     number is refused naming the field, because "5" could mean anything;
//   - a Duration is a time.Duration that is also never negative (a
//     timeout, an interval);
//   - a Size is a byte count written as 1048576, "64KiB" or "8MiB";
//   - a value of the wrong kind names the field, not the Go type
//     ("line 7: targets[0].weight: want an integer, got \"heavy\"");
//   - all these are collected into one *Error instead of stopping at the
//     first.
//
// Types with their own UnmarshalYAML keep it; confyaml still refuses unknown
// fields and unit-less durations directly inside such a struct, and turns
// the errors it returns into field errors.
//
// DecodeNode applies the same rules to a section kept as a yaml.Node and
// decoded later by its owner (a balance strategy's settings), with paths
// under the section's.
//
// Validation after decoding stays with each config; Doc.Errorf gives its
// errors the same shape, with the line of the field (or of its nearest
// parent present in the file).
package confyaml
