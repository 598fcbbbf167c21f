package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// newSupervisorCmd is replaced by the component's own command tree as it lands.
func newSupervisorCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "supervisor",
		Short: "The long-running session supervisor (not built yet)",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("supervisor: not built yet")
		},
	}
}
