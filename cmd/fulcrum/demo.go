package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// newDemoCmd is replaced by the component's own command tree as it lands.
func newDemoCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "demo",
		Short: "Run demo upstreams (not built yet)",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("demo: not built yet")
		},
	}
}
