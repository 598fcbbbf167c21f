package main

import (
	"bytes"
	"runtime/debug"
	"testing"
)

func TestVersionString(t *testing.T) {
	vcs := []debug.BuildSetting{
		{Key: "GOOS", Value: "linux"}, {Key: "GOARCH", Value: "amd64"},
		{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.time", Value: "2026-11-23T21:00:00Z"},
	}
	cases := []struct {
		name     string
		info     *debug.BuildInfo
		ok       bool
		override string
		want     string
	}{
		{"no build info", nil, false, "", "(devel)"},
		{"go run", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}}, true, "", "(devel) go1.26.8"},
		{"go install @version", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.3"}, Settings: vcs[:2]}, true, "", "v1.2.3 go1.26.8 linux/amd64"},
		{"go build in a checkout", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.4-0.20261123210000-0123456789ab+dirty"},
			Settings: append(vcs[:4:4], debug.BuildSetting{Key: "vcs.modified", Value: "true"})}, true, "",
			"v1.2.4-0.20261123210000-0123456789ab+dirty (commit 0123456789ab, 2026-11-23T21:00:00Z, modified) go1.26.8 linux/amd64"},
		{"-ldflags -X main.version", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: vcs}, true, "v9.9.9",
			"v9.9.9 (commit 0123456789ab, 2026-11-23T21:00:00Z) go1.26.8 linux/amd64"},
	}
	for _, tc := range cases {
		version = tc.override
		if got := versionString(tc.info, tc.ok); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	version = ""
}

// `fulcrum --version` and `fulcrum version` print the same line.
func TestVersionFlag(t *testing.T) {
	run := func(args ...string) string {
		var out bytes.Buffer
		root := newRootCmd()
		root.SetOut(&out)
		root.SetArgs(args)
		if err := root.Execute(); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return out.String()
	}
	flag, cmd := run("--version"), run("version")
	if flag != cmd || len(flag) < len("fulcrum x\n") {
		t.Fatalf("--version printed %q, version printed %q", flag, cmd)
	}
}
