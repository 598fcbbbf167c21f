package main

import (
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// version overrides the module version from the build info when set at
// build time (-ldflags "-X main.version=v1.2.3"), for builds that cannot
// carry it otherwise.
var version string

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, the commit it was built from and the Go version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "fulcrum %s\n", versionString(debug.ReadBuildInfo()))
			return err
		},
	}
}

// versionString describes the build from what the Go toolchain recorded:
// the module version ("v1.2.3" from `go install ...@v1.2.3`, a
// pseudo-version from a tagged checkout, "(devel)" otherwise), the VCS
// commit, its time and whether the tree had uncommitted changes (`go build`
// in a git checkout records them; `go run` and -buildvcs=false do not),
// and the Go version and platform.
func versionString(info *debug.BuildInfo, ok bool) string {
	v := version
	if v == "" && ok {
		v = info.Main.Version
	}
	if v == "" {
		v = "(devel)"
	}
	if !ok {
		return v
	}
	var rev, at, dirty, goos, goarch string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = ", modified"
			}
		case "GOOS":
			goos = s.Value
		case "GOARCH":
			goarch = s.Value
		}
	}
	var b strings.Builder
	b.WriteString(v)
	if rev != "" {
		fmt.Fprintf(&b, " (commit %.12s", rev)
		if at != "" {
			b.WriteString(", " + at)
		}
		b.WriteString(dirty + ")")
	}
	if info.GoVersion != "" {
		b.WriteString(" " + info.GoVersion)
	}
	if goos != "" && goarch != "" {
		b.WriteString(" " + goos + "/" + goarch)
	}
	return b.String()
}
