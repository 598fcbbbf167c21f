package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// newSimCmd is replaced by the component's own command tree as it lands.
func newSimCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "sim",
		Short: "Simulators for demos and tests (not built yet)",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("sim: not built yet")
		},
	}
}
