package testenv

import (
	"net"
	"runtime"
	"strings"
	"testing"
)

// fakeTB records how Need ends a test; like testing.T it stops the
// goroutine on Skip and Fatal.
type fakeTB struct {
	testing.TB
	skipped, failed string
}

func (f *fakeTB) Helper()           {}
func (f *fakeTB) Skip(args ...any)  { f.skipped = args[0].(string); runtime.Goexit() }
func (f *fakeTB) Fatal(args ...any) { f.failed = args[0].(string); runtime.Goexit() }

func need(addr string) fakeTB {
	var f fakeTB
	done := make(chan struct{})
	go func() {
		defer close(done)
		Need(&f, addr)
	}()
	<-done
	return f
}

// A down service skips with its start command, and fails under CI=true.
func TestNeedSkipsWithHintOrFailsUnderCI(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // now nothing listens there
	startHint[addr] = "etcd (apt-get install etcd-server): etcd ..."
	defer delete(startHint, addr)

	t.Setenv("CI", "")
	f := need(addr)
	if f.failed != "" || !strings.Contains(f.skipped, "etcd (apt-get install etcd-server)") {
		t.Fatalf("outside CI: skipped %q, failed %q", f.skipped, f.failed)
	}
	t.Setenv("CI", "true")
	f = need(addr)
	if f.skipped != "" || !strings.Contains(f.failed, "CI=true: service tests may not skip") {
		t.Fatalf("under CI: skipped %q, failed %q", f.skipped, f.failed)
	}
}

func TestEtcd(t *testing.T) {
	if got := Etcd(t); got != "http://"+EtcdAddr {
		t.Fatalf("Etcd = %q", got)
	}
}
