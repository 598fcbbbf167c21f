package capacity

import (
	"fmt"
	"math"

	"github.com/fulcrum-lb/fulcrum/balance"
)

// Name is the strategy's name in balance's registry (and in the gateway's
// strategy field).
const Name = "capacity"

func init() {
	// Like grpc's weightedroundrobin: importing the package registers it.
	// The name is taken only if some other package registered "capacity"
	// first, a conflict in the program, not in its input.
	if err := balance.Register(Name, New); err != nil {
		panic(err)
	}
}

// Settings are capacity's settings (the gateway's strategy_settings).
// New decodes them over DefaultSettings, so a key left out keeps its
// default; a value given whole (balance.SettingsFrom) replaces every
// field, so build it from DefaultSettings.
type Settings struct {
	// InitialLimit is a learned limit's first value (default 20).
	InitialLimit float64 `yaml:"initial_limit"`
	// MinLimit and MaxLimit bound a learned limit (defaults 1 and 4096).
	MinLimit float64 `yaml:"min_limit"`
	MaxLimit float64 `yaml:"max_limit"`
	// Tolerance is the ratio of a window's latency to the baseline above
	// which the window reads as queueing (default 2; above 1).
	Tolerance float64 `yaml:"tolerance"`
	// ProbeInterval is how many mean success latencies a full, refusing
	// target holds its limit before a probe of one permit more (default
	// 4).
	ProbeInterval float64 `yaml:"probe_interval"`
	// QueuedProbeInterval is ProbeInterval while callers wait in the
	// queue (default 1): a permit found then serves a waiter at once.
	QueuedProbeInterval float64 `yaml:"queued_probe_interval"`
}

// DefaultSettings returns every setting at its default.
func DefaultSettings() Settings {
	return Settings{InitialLimit: 20, MinLimit: 1, MaxLimit: 4096, Tolerance: 2, ProbeInterval: 4, QueuedProbeInterval: 1}
}

// New is the strategy's balance.Factory: it decodes set over the
// defaults (nil: every default) and checks it, a bad value reported as a
// *balance.FieldError naming its key.
func New(set balance.Settings) (balance.Strategy, error) {
	s := DefaultSettings()
	if set != nil {
		if err := set.Decode(&s); err != nil {
			return nil, err
		}
	}
	if err := s.check(); err != nil {
		return nil, err
	}
	return strategy{cfg: s}, nil
}

// check refuses values the learner cannot work with; a zero is refused
// too, not taken for the default, as it was when the settings were
// named numbers.
func (s Settings) check() error {
	// In key order, as the named numbers were checked.
	for _, f := range []struct {
		key string
		v   float64
	}{
		{"initial_limit", s.InitialLimit}, {"max_limit", s.MaxLimit}, {"min_limit", s.MinLimit},
		{"probe_interval", s.ProbeInterval}, {"queued_probe_interval", s.QueuedProbeInterval}, {"tolerance", s.Tolerance},
	} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) {
			return fieldErr(f.key, "%v is not a number", f.v)
		}
	}
	switch {
	case s.MinLimit < 1:
		return fieldErr("min_limit", "%v is below 1", s.MinLimit)
	case s.MaxLimit < s.MinLimit:
		return fieldErr("max_limit", "%v is below min_limit %v", s.MaxLimit, s.MinLimit)
	case s.InitialLimit < s.MinLimit || s.InitialLimit > s.MaxLimit:
		return fieldErr("initial_limit", "%v is outside [%v, %v]", s.InitialLimit, s.MinLimit, s.MaxLimit)
	case s.Tolerance <= 1:
		return fieldErr("tolerance", "%v must be above 1", s.Tolerance)
	case s.ProbeInterval <= 0 || s.ProbeInterval > 1000:
		return fieldErr("probe_interval", "%v is outside (0, 1000]", s.ProbeInterval)
	case s.QueuedProbeInterval <= 0 || s.QueuedProbeInterval > 1000:
		return fieldErr("queued_probe_interval", "%v is outside (0, 1000]", s.QueuedProbeInterval)
	}
	return nil
}

func fieldErr(field, format string, args ...any) error {
	return &balance.FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}
