package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// newGatewayCmd is replaced by the component's own command tree as it lands.
func newGatewayCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "gateway",
		Short: "Run the HTTP load-balancing gateway (not built yet)",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("gateway: not built yet")
		},
	}
}
