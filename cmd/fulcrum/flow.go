package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// newFlowCmd is replaced by the component's own command tree as it lands.
func newFlowCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "flow",
		Short: "The multi-stage task service (not built yet)",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("flow: not built yet")
		},
	}
}
