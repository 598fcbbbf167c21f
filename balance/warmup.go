package balance

import "math"

// warmup computes effective weights during a target's warm-up window.
type warmup struct {
	envoy      bool
	aggression float64
	minFactor  float64
}

// weight returns e's effective weight at clock now (nanoseconds).
func (w warmup) weight(e *Endpoint, now int64) float64 {
	weight := float64(e.t.Weight)
	win := int64(e.t.Warmup)
	up := now - e.s.upSince.Load()
	if win <= 0 || up >= win || weight <= 0 {
		return weight
	}
	if up < 0 {
		up = 0
	}
	if !w.envoy {
		// linear (Dubbo's formula): ww = uptime / (warmup / weight),
		// clamped to [1, weight].
		ww := float64(up) * weight / float64(win)
		return math.Min(math.Max(ww, 1), weight)
	}
	// Envoy slow start: time_factor = max(uptime_s, 1) / window_s.
	tf := math.Max(float64(up)/1e9, 1) / (float64(win) / 1e9)
	if tf > 1 {
		tf = 1
	}
	f := math.Pow(tf, 1/w.aggression)
	return weight * math.Max(w.minFactor, f)
}
