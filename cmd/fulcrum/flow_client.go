package main

import "github.com/spf13/cobra"

// flowClientCmds returns the command-line client (submit, get, ls, stats)
// that newFlowCmd adds beside serve.
func flowClientCmds() []*cobra.Command { return nil }
