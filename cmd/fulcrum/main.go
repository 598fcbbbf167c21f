// Command fulcrum is the one binary of Fulcrum: a load-balancing gateway, a
// multi-stage task service and a long-running session supervisor.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	if err := newRootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "fulcrum:", err)
		os.Exit(1)
	}
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "fulcrum",
		Short:         "Balance requests, tasks and long-running sessions",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(
		newVersionCmd(),
		newGatewayCmd(),
		newDemoCmd(),
		newFlowCmd(),
		newSupervisorCmd(),
		newSimCmd(),
	)
	return root
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "fulcrum %s\n", version)
			return err
		},
	}
}
