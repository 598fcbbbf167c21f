package balance_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/fulcrum-lb/fulcrum/balance"
)

// fastest is a strategy written outside the package with only its exported
// API, as a plug-in would be: it picks the usable target of lowest mean
// success latency, trying unmeasured targets first. Its per-target mean is
// its own state (StateOf), fed by Observe; the balancer keeps it across
// snapshots for as long as the target stays. Its one setting, smoothing,
// it decodes and checks itself, as the built-in strategies do theirs.
type fastest struct{ smoothing int64 }

// fastestSettings are the strategy's settings (YAML: strategy_settings).
type fastestSettings struct {
	// Smoothing is the EWMA's divisor: a sample moves the mean by
	// 1/smoothing of the difference (default 4).
	Smoothing int64 `yaml:"smoothing"`
}

func newFastest(s balance.Settings) (balance.Strategy, error) {
	cfg := fastestSettings{Smoothing: 4}
	if s != nil {
		if err := s.Decode(&cfg); err != nil {
			return nil, err
		}
	}
	if cfg.Smoothing < 1 {
		return nil, &balance.FieldError{Field: "smoothing", Msg: fmt.Sprintf("%d is below 1", cfg.Smoothing)}
	}
	return fastest{smoothing: cfg.Smoothing}, nil
}

type fastestState struct{ mean atomic.Int64 } // EWMA of success latency, ns; 0 = unmeasured

type fastestPicker struct {
	eps       []*balance.Endpoint
	st        []*fastestState // by endpoint index
	smoothing int64
}

func (f fastest) Build(eps []*balance.Endpoint) balance.Picker {
	p := &fastestPicker{eps: eps, st: make([]*fastestState, len(eps)), smoothing: f.smoothing}
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
		st.mean.Store(old + (int64(o.Latency)-old)/p.smoothing)
	}
}

func Example_registerStrategy() {
	reg := balance.NewRegistry() // balance.Register would add it process-wide
	if err := reg.Register("fastest", newFastest); err != nil {
		panic(err)
	}
	// Its settings are checked like a built-in's (the gateway's YAML
	// strategy_settings arrive the same way, as a YAML node).
	_, err := balance.New("fastest", balance.Options{Registry: reg, Settings: balance.SettingsFrom(fastestSettings{Smoothing: 0})})
	fmt.Println(err)
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte("smoothing: 2"), &doc); err != nil {
		panic(err)
	}
	b, err := balance.New("fastest", balance.Options{Registry: reg, Settings: doc.Content[0]})
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
	// balance: strategy "fastest": smoothing: 0 is below 1
	// a b c b b
	// d d d
}
