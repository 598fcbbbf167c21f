package capacity

import (
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/fulcrum-lb/fulcrum/balance"
	"github.com/fulcrum-lb/fulcrum/internal/confyaml"
)

// The tests reach the strategy as a user's own would: through balance's
// exported API. A recorder wraps it to keep what the last Build was given
// and made (the usable endpoints, the picker), which the balancer keeps
// to itself.

// snapView is one Build's endpoints and picker.
type snapView struct {
	eps      []*balance.Endpoint
	observer balance.Observer
}

type recorder struct {
	inner balance.Strategy
	last  *atomic.Pointer[snapView]
}

func (r recorder) Build(eps []*balance.Endpoint) balance.Picker {
	p := r.inner.Build(eps)
	obs, _ := p.(balance.Observer)
	r.last.Store(&snapView{eps: eps, observer: obs})
	// The strategy's own picker: the balancer finds its Observer as
	// without the recorder.
	return p
}

// views maps each test balancer to its recorder's last view.
var views sync.Map // *balance.Balancer -> *atomic.Pointer[snapView]

// newRecorded builds a capacity balancer whose builds are recorded.
func newRecorded(settings balance.Settings, clock func() time.Time, src rand.Source) (*balance.Balancer, error) {
	last := new(atomic.Pointer[snapView])
	reg := balance.NewRegistry()
	if err := reg.Register(Name, func(s balance.Settings) (balance.Strategy, error) {
		st, err := New(s)
		if err != nil {
			return nil, err
		}
		return recorder{inner: st, last: last}, nil
	}); err != nil {
		return nil, err
	}
	b, err := balance.New(Name, balance.Options{Registry: reg, Settings: settings, Clock: clock, Rand: src})
	if err != nil {
		return nil, err
	}
	views.Store(b, last)
	return b, nil
}

// snapOf is b's current snapshot as the strategy saw it built.
func snapOf(b *balance.Balancer) *snapView {
	v, ok := views.Load(b)
	if !ok {
		panic("snapOf: a balancer not made by newRecorded")
	}
	return v.(*atomic.Pointer[snapView]).Load()
}

// queued is the callers waiting in b's queue.
func queued(b *balance.Balancer) int {
	n, _ := b.Queued()
	return n
}

// settingsOf gives named numbers to the strategy as the gateway's
// configuration does: a YAML mapping, decoded strictly (unknown keys
// refused with the nearest known one). nil gives no settings.
func settingsOf(params map[string]float64) balance.Settings {
	if params == nil {
		return nil
	}
	n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := params[k]
		text := strconv.FormatFloat(v, 'g', -1, 64)
		switch {
		case math.IsNaN(v):
			text = ".nan"
		case math.IsInf(v, 1):
			text = ".inf"
		case math.IsInf(v, -1):
			text = "-.inf"
		}
		n.Content = append(n.Content,
			&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: k},
			&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!float", Value: text})
	}
	return yamlSettings{n}
}

type yamlSettings struct{ n *yaml.Node }

func (s yamlSettings) Decode(v any) error {
	_, err := confyaml.DecodeNode(s.n, v, "")
	return err
}

// capClock is a settable clock for the learner simulations.
type capClock struct{ ns atomic.Int64 }

func (c *capClock) Now() time.Time { return time.Unix(0, c.ns.Load()) }
