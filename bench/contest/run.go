package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"regexp"
	"runtime"
	"time"
)

// starter starts a contender in front of env.urls and returns the URL to
// load and a function that stops it.
type starter func(ctx context.Context, env *runEnv) (url string, stop func(), err error)

// contender is one row of the table.
type contender struct {
	Name string
	Kind string // "fulcrum" (gateway binary), "library" (in process) or "peer"
	// Needs names the binary the contender runs ("" for in-process ones).
	Needs string
	// Config says how the contender is configured (the library peers:
	// the settings their documentation recommends), for the result JSON.
	Config string
	// Learns says the contender learns its per-target limits, so in
	// fleet mode the record says how its gateways split them.
	Learns bool
	start  starter
}

// runEnv is what a contender gets to start.
type runEnv struct {
	sc      *Scenario
	urls    []string
	dir     string // scratch directory for configs and logs
	log     io.Writer
	verbose bool
	fulcrum string // path of the fulcrum binary ("" when it could not be built)

	// started is closed when the measured run (warm-up included) starts,
	// at start; the oracle follows the stages from there.
	started chan struct{}
	start   time.Time
	// gateways is how many instances of the contender run (fleet mode;
	// 1 otherwise): static per-target limits are divided by it.
	gateways int
	// config is the configuration a process contender was started with
	// (for the result JSON).
	config string
	// timelines are what each instance of a library contender sampled of
	// its targets' limits during its run (none for the others); runOne
	// moves them to the record.
	timelines []*Timeline
}

// perGateway divides a per-target limit between the fleet's gateways, as
// a user of a static limit would configure each of them (at least 1).
func (env *runEnv) perGateway(limit int) int {
	return max(1, limit/max(env.gateways, 1))
}

// Record is one contender's result, one JSON record each.
type Record struct {
	Contender        string           `json:"contender"`
	Kind             string           `json:"kind"`
	Successes        int64            `json:"successes"`
	Share            float64          `json:"share_of_max"`
	ShareOfOracle    float64          `json:"share_of_oracle,omitempty"` // successes / the oracle row's (when it ran)
	Errors           int64            `json:"errors"`
	ErrorsBy         map[string]int64 `json:"errors_by,omitempty"` // by status code, or timeout, transport
	P50ms            float64          `json:"p50_ms"`
	P99ms            float64          `json:"p99_ms"`
	P999ms           float64          `json:"p999_ms"`
	RatioToBestPeer  float64          `json:"ratio_to_best_peer,omitempty"`
	ProviderServed   int64            `json:"provider_served"`
	ProviderRejected int64            `json:"provider_rejected"`
	// IdlePermits is the share of permit-time left free while the
	// connections exceeded the permits (measured phase).
	IdlePermits float64 `json:"idle_permits_overloaded"`
	// BusyConns is the share of connection-time spent holding a permit
	// while the permits exceeded the connections (measured phase).
	BusyConns float64 `json:"busy_connections_underloaded"`
	// DrawMean is the mean service time drawn in the measured phase, as
	// a multiple of the stages' means: above 1, the draws were unlucky.
	DrawMean float64 `json:"service_draw_mean"`
	// OverrunUs is how many microseconds longer than drawn a served
	// request held its permit on average (measured phase): the
	// providers' process was late to end it.
	OverrunUs float64   `json:"service_overrun_us"`
	PerSecond []float64 `json:"per_second"`
	Timeline  *Timeline `json:"timeline,omitempty"` // library rows: each target's limit against its permits
	// Fleet mode: how many instances ran, each instance's timeline
	// (library rows), and how the learned limits split each target.
	Gateways       int         `json:"gateways,omitempty"`
	FleetTimelines []*Timeline `json:"fleet_timelines,omitempty"`
	FleetSplit     *FleetSplit `json:"fleet_split,omitempty"`
	Config         string      `json:"config,omitempty"`
	Skipped        string      `json:"skipped,omitempty"`
	LoadAvg        string      `json:"loadavg_after,omitempty"` // the machine's load when the row ended
	Rounds         int         `json:"rounds,omitempty"`        // runs this record is the best of
}

// Report is a whole run.
type Report struct {
	Scenario       *Scenario `json:"scenario"`
	Short          bool      `json:"short"`
	Gateways       int       `json:"gateways"`
	TheoreticalMax float64   `json:"theoretical_max"`
	MaxPerSecond   []float64 `json:"max_per_second"`
	Started        time.Time `json:"started"`
	CPUs           int       `json:"cpus"`
	LoadAvg        string    `json:"loadavg_before"`
	Rounds         int       `json:"rounds"`
	// Queueing is what the scenario forces on a balancer that refuses
	// nothing (Scenario.ForcedWait).
	Queueing Queueing `json:"queueing"`
	Records  []Record `json:"records"`
}

// runAll runs every contender whose name matches only, in turn, against
// the same providers.
//
// With rounds above 1 each contender runs that many times and keeps its
// best run: on a shared machine, interference only ever lowers a score.
func runAll(ctx context.Context, sc *Scenario, short bool, rounds int, cs []contender, only *regexp.Regexp, env *runEnv) (*Report, error) {
	ps, err := startProviders(sc)
	if err != nil {
		return nil, err
	}
	defer ps.Close()
	env.sc, env.urls = sc, ps.URLs()
	rep := &Report{
		Scenario: sc, Short: short, TheoreticalMax: sc.TheoreticalMax(), MaxPerSecond: sc.MaxSeries(),
		Started: time.Now(), CPUs: runtime.NumCPU(), LoadAvg: loadAvg(), Rounds: max(rounds, 1), Gateways: sc.fleet(),
		Queueing: sc.ForcedWait(),
	}
	var sel []contender
	for _, c := range cs {
		if only == nil || only.MatchString(c.Name) {
			sel = append(sel, c)
		}
	}
	best := make([]*Record, len(sel))
	for round := range max(rounds, 1) {
		if rounds > 1 {
			fmt.Fprintf(env.log, "round %d of %d\n", round+1, rounds)
		}
		// Each round starts one further along, so that no contender always
		// runs at the same point of a machine's busy spell.
		for k := range sel {
			i := (k + round) % len(sel)
			rec, err := runOne(ctx, sel[i], ps, rep, env)
			if err != nil {
				return rep, err
			}
			if best[i] == nil || rec.Successes > best[i].Successes {
				rec.Rounds = best[i].roundsPlus1()
				best[i] = &rec
			} else {
				best[i].Rounds++
			}
		}
	}
	for _, r := range best {
		rep.Records = append(rep.Records, *r)
	}
	rankPeers(rep)
	rankOracle(rep)
	return rep, nil
}

func (r *Record) roundsPlus1() int {
	if r == nil {
		return 1
	}
	return r.Rounds + 1
}

// runOne runs one contender once.
func runOne(ctx context.Context, c contender, ps *providers, rep *Report, env *runEnv) (Record, error) {
	if ctx.Err() != nil {
		return Record{}, ctx.Err()
	}
	rec := Record{Contender: c.Name, Kind: c.Kind, Config: c.Config}
	if c.Needs != "" {
		if _, err := lookPath(c.Needs); err != nil {
			rec.Skipped = c.Needs + " is not installed (apt-get install -y " + c.Needs + ", or run with -install)"
			fmt.Fprintf(env.log, "%-34s skipped: %s\n", c.Name, rec.Skipped)
			return rec, nil
		}
	}
	if !ps.Idle(10 * time.Second) {
		fmt.Fprintf(env.log, "warning: providers still busy from the previous contender\n")
	}
	env.started, env.timelines, env.config = make(chan struct{}), nil, ""
	// Fleet mode: n instances, each its own process or forwarder, all in
	// front of the same providers. The oracle stays one: it knows every
	// permit, so it is the fleet's yardstick, not a member of it.
	n := rep.Scenario.fleet()
	if c.Kind == "oracle" {
		n = 1
	}
	env.gateways = n
	var urls []string
	var stops []func()
	stop := func() {
		for _, s := range stops {
			s()
		}
	}
	var err error
	for range n {
		var url string
		var s func()
		if url, s, err = c.start(ctx, env); err != nil {
			break
		}
		stops = append(stops, s)
		if err = waitReady(ctx, url, 15*time.Second); err != nil {
			break
		}
		urls = append(urls, url)
	}
	if err != nil {
		stop()
		rec.Skipped = "did not start: " + err.Error()
		fmt.Fprintf(env.log, "%-34s skipped: %s\n", c.Name, rec.Skipped)
		return rec, nil
	}
	start := time.Now()
	ps.Reset(start)
	env.start = start
	close(env.started)
	res := runLoad(ctx, urls, rep.Scenario.Load, rep.Scenario.Seed, start)
	rec.IdlePermits, rec.BusyConns = ps.Shares(time.Now(), rep.Scenario.Load.Connections)
	rec.DrawMean = ps.DrawMean()
	rec.OverrunUs = float64(ps.Overrun()) / 1e3
	stop()
	for _, p := range ps.list {
		rec.ProviderServed += p.served.Load()
		rec.ProviderRejected += p.rejected.Load()
	}
	rec.Successes, rec.Errors, rec.ErrorsBy = res.Successes, res.Errors, res.ErrorsBy
	rec.Share = float64(res.Successes) / rep.TheoreticalMax
	rec.P50ms, rec.P99ms, rec.P999ms = ms(res.P50), ms(res.P99), ms(res.P999)
	rec.PerSecond = res.PerSecond
	if len(env.timelines) > 0 {
		rec.Timeline = env.timelines[0]
	}
	if n > 1 {
		rec.Gateways = n
		rec.FleetTimelines = env.timelines
		if c.Learns {
			rec.FleetSplit = fleetSplit(rep.Scenario, env.timelines)
		}
	}
	rec.LoadAvg = loadAvg()
	if rec.Config == "" {
		rec.Config = env.config
	}
	fmt.Fprintf(env.log, "%-34s %8d ok  %6.1f%% of max  %7d errors %v  p99 %7.1f ms  idle permits %.2f%%  busy conns %.2f%%  draws x%.4f  overrun %.0f µs  (providers rejected %d; load %s)\n",
		c.Name, rec.Successes, 100*rec.Share, rec.Errors, rec.ErrorsBy, rec.P99ms, 100*rec.IdlePermits, 100*rec.BusyConns, rec.DrawMean, rec.OverrunUs, rec.ProviderRejected, rec.LoadAvg)
	return rec, nil
}

// rankPeers fills every record's ratio to the best peer.
func rankPeers(rep *Report) {
	var best int64
	for _, r := range rep.Records {
		if r.Kind == "peer" && r.Skipped == "" && r.Successes > best {
			best = r.Successes
		}
	}
	if best > 0 {
		for i := range rep.Records {
			if rep.Records[i].Skipped == "" {
				rep.Records[i].RatioToBestPeer = float64(rep.Records[i].Successes) / float64(best)
			}
		}
	}
}

// rankOracle fills every record's share of the oracle's successes, when
// the oracle ran.
func rankOracle(rep *Report) {
	var oracle int64
	for _, r := range rep.Records {
		if r.Kind == "oracle" && r.Skipped == "" {
			oracle = r.Successes
		}
	}
	if oracle > 0 {
		for i := range rep.Records {
			if rep.Records[i].Skipped == "" {
				rep.Records[i].ShareOfOracle = float64(rep.Records[i].Successes) / float64(oracle)
			}
		}
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// waitReady dials the contender's port until it accepts, up to timeout.
func waitReady(ctx context.Context, url string, timeout time.Duration) error {
	host := url
	if i := len("http://"); len(host) > i && host[:i] == "http://" {
		host = host[i:]
	}
	for i := 0; i < len(host); i++ {
		if host[i] == '/' {
			host = host[:i]
			break
		}
	}
	deadline := time.Now().Add(timeout)
	for {
		c, err := net.DialTimeout("tcp", host, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("nothing listening on %s after %v: %w", host, timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
