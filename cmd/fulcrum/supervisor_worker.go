package main

import "github.com/spf13/cobra"

// newSupervisorWorkerCmd returns `fulcrum supervisor worker`, which
// newSupervisorCmd adds as a subcommand; nil until the worker SDK lands.
func newSupervisorWorkerCmd() *cobra.Command { return nil }
