package balance_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fulcrum-lb/fulcrum/balance"
)

// fastest is a strategy written outside the package with only its exported
// API, as a plug-in would be: it picks the usable target of lowest mean
// success latency, trying unmeasured targets first. Its per-target mean is
// its own state (StateOf), fed by Observe; the balancer keeps it across
// snapshots for as long as the target stays.
type fastest struct{}

type fastestState struct{ mean atomic.Int64 } // EWMA of success latency, ns; 0 = unmeasured

type fastestPicker struct {
	eps []*balance.Endpoint
	st  []*fastestState // by endpoint index
}

func (fastest) Build(eps []*balance.Endpoint) balance.Picker {
	p := &fastestPicker{eps: eps, st: make([]*fastestState, len(eps))}
	for i, e := range eps {
		p.st[i] = balance.StateOf[fastestState](e)
	}
	return p
}

func (p *fastestPicker) Pick(info balance.PickInfo) *balance.Endpoint {
	best := -1
	for i, e := range p.eps {
		if info.Usable(e) && (best < 0 || p.st[i].mean.Load() < p.st[best].mean.Load()) {
			best = i
		}
	}
	if best < 0 {
		return nil
	}
	return p.eps[best]
}

// Observe makes the picker an Observer: Done measures latency for it and
// hands each of its picks' outcomes back here.
func (p *fastestPicker) Observe(e *balance.Endpoint, o balance.Outcome) {
	if o.Err != nil || o.Latency <= 0 {
		return
	}
	st := p.st[e.Index()]
	if old := st.mean.Load(); old == 0 {
		st.mean.Store(int64(o.Latency))
	} else {
		st.mean.Store(old + (int64(o.Latency)-old)/4)
	}
}

func Example_registerStrategy() {
	reg := balance.NewRegistry() // balance.Register would add it process-wide
	if err := reg.Register("fastest", func(balance.Options) (balance.Strategy, error) { return fastest{}, nil }); err != nil {
		panic(err)
	}
	b, err := balance.New("fastest", balance.Options{Registry: reg})
	if err != nil {
		panic(err)
	}
	_ = b.Update([]balance.Target{{Addr: "a", Weight: 1}, {Addr: "b", Weight: 1}, {Addr: "c", Weight: 1}})
	latency := map[string]time.Duration{"a": 30 * time.Millisecond, "b": 10 * time.Millisecond, "c": 20 * time.Millisecond, "d": 5 * time.Millisecond}
	picks := func(n int) {
		var got []string
		for range n {
			p, err := b.Pick("")
			if err != nil {
				panic(err)
			}
			got = append(got, p.Addr())
			p.Report(latency[p.Addr()], nil)
		}
		fmt.Println(strings.Join(got, " "))
	}
	picks(5)
	// A new target: the others keep what was learned of them.
	_ = b.Update([]balance.Target{{Addr: "a", Weight: 1}, {Addr: "b", Weight: 1}, {Addr: "c", Weight: 1}, {Addr: "d", Weight: 1}})
	picks(3)
	// Output:
	// a b c b b
	// d d d
}
