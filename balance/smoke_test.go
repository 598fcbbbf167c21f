package balance

import "testing"

func TestSmokeAll(t *testing.T) {
	for _, name := range Names() {
		b, err := New(name, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.Pick("k"); err != ErrNoTargets {
			t.Fatalf("%s: empty pick: %v", name, err)
		}
		if err := b.Update([]Target{{Addr: "a", Weight: 5}, {Addr: "b", Weight: 1}, {Addr: "c", Weight: 1}}); err != nil {
			t.Fatal(err)
		}
		counts := map[string]int{}
		for i := 0; i < 700; i++ {
			p, err := b.Pick("key")
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			counts[p.Addr()]++
			p.Done(nil)
		}
		t.Logf("%s: %v", name, counts)
	}
}
