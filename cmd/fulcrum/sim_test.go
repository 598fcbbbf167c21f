package main

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// Bad flags of `fulcrum sim rooms` and `fulcrum supervisor worker` are
// refused before anything starts, naming the flag.
func TestSimAndWorkerFlags(t *testing.T) {
	tests := []struct {
		name string
		cmd  func() *cobra.Command
		args []string
		want string
	}{
		{"negative rate", newSimCmd, []string{"rooms", "--rate", "-1"}, "--rate"},
		{"negative rooms", newSimCmd, []string{"rooms", "--rooms", "-3"}, "--rooms"},
		{"long heartbeat", newSimCmd, []string{"rooms", "--heartbeat", "1m"}, "--heartbeat"},
		{"bad listen", newSimCmd, []string{"rooms", "--listen", "nope"}, "--listen"},
		{"zero max load", newSupervisorWorkerCmd, []string{"--max-load", "0"}, "--max-load"},
		{"bad supervisor url", newSupervisorWorkerCmd, []string{"--supervisor", "ftp://x"}, "scheme"},
		{"empty id", newSupervisorWorkerCmd, []string{"--id", ""}, "--id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.cmd()
			c.SetArgs(tt.args)
			c.SilenceUsage, c.SilenceErrors = true, true
			err := c.Execute()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("%v: %v, want an error naming %s", tt.args, err, tt.want)
			}
		})
	}
}
