package balance

// random: weighted random. Equal weights pick with one random number; unequal
// ones use Vose's alias table, built once per snapshot, so a pick is O(1)
// for any number of targets.
type randomStrategy struct{}

func newRandom(s Settings) (Strategy, error) {
	if err := noSettings(s); err != nil {
		return nil, err
	}
	return randomStrategy{}, nil
}

func (randomStrategy) Build(eps []*Endpoint) Picker {
	p := &randomPicker{eps: eps, equal: true}
	for _, e := range eps {
		if e.Weight() != eps[0].Weight() {
			p.equal = false
		}
	}
	if !p.equal {
		p.alias = newAlias(eps)
	}
	return p
}

type randomPicker struct {
	eps   []*Endpoint
	equal bool
	alias alias
}

func (p *randomPicker) Pick(info PickInfo) *Endpoint {
	n := len(p.eps)
	if n == 0 {
		return nil
	}
	if info.Warming() {
		return weightedAmong(&info, p.eps)
	}
	var e *Endpoint
	if p.equal {
		e = p.eps[info.IntN(n)]
	} else {
		e = p.eps[p.alias.pick(&info)]
	}
	if info.Usable(e) {
		return e
	}
	return weightedAmong(&info, p.eps)
}

// weightedAmong picks by (warm-up) weight among the usable endpoints; the
// slow path, O(n).
func weightedAmong(info *PickInfo, eps []*Endpoint) *Endpoint {
	var total float64
	for _, e := range eps {
		if info.Usable(e) {
			total += info.Weight(e)
		}
	}
	if total <= 0 {
		return nil
	}
	r := info.Float64() * total
	var last *Endpoint
	for _, e := range eps {
		if !info.Usable(e) {
			continue
		}
		last = e
		if r -= info.Weight(e); r < 0 {
			return e
		}
	}
	return last
}

// alias is Vose's alias method table.
type alias struct {
	prob  []float64
	other []int32
}

func newAlias(eps []*Endpoint) alias {
	n := len(eps)
	a := alias{prob: make([]float64, n), other: make([]int32, n)}
	var total float64
	for _, e := range eps {
		total += float64(e.Weight())
	}
	scaled := make([]float64, n)
	var small, large []int32
	for i, e := range eps {
		scaled[i] = float64(e.Weight()) * float64(n) / total
		if scaled[i] < 1 {
			small = append(small, int32(i))
		} else {
			large = append(large, int32(i))
		}
	}
	for len(small) > 0 && len(large) > 0 {
		s, l := small[len(small)-1], large[len(large)-1]
		small = small[:len(small)-1]
		a.prob[s] = scaled[s]
		a.other[s] = l
		scaled[l] -= 1 - scaled[s]
		if scaled[l] < 1 {
			large = large[:len(large)-1]
			small = append(small, l)
		}
	}
	for _, i := range large {
		a.prob[i] = 1
	}
	for _, i := range small { // rounding leftovers
		a.prob[i] = 1
	}
	return a
}

func (a alias) pick(info *PickInfo) int {
	r := info.Uint64()
	i := int((r >> 32) * uint64(len(a.prob)) >> 32)
	// The low 32 bits give the coin, independent of the column.
	if float64(uint32(r))/(1<<32) < a.prob[i] {
		return i
	}
	return int(a.other[i])
}
