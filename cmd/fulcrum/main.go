// Command fulcrum is the one binary of Fulcrum: a load-balancing gateway, a
// multi-stage task service and a long-running session supervisor.
package main

import (
	"fmt"
	"os"
	"runtime/debug"

	"github.com/spf13/cobra"
)

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
		Version:       versionString(debug.ReadBuildInfo()),
	}
	root.SetVersionTemplate("fulcrum {{.Version}}\n") // the same line as `fulcrum version`
	root.AddCommand(
		newVersionCmd(),
		newGatewayCmd(),
		newDemoCmd(),
		newFlowCmd(),
		newSupervisorCmd(),
		newSimCmd(),
		newRegisterCmd(),
	)
	return root
}
