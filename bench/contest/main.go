package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"
)

// shortRun is how long a contender runs in the short mode, warm-up included.
const shortRun = 4 * time.Second

// options are the command's flags.
type options struct {
	scenario string
	short    bool
	out      string
	only     string
	install  bool
	fulcrum  string
	verbose  bool
	rounds   int
	gateways int           // fleet size overriding the scenario's (0: the scenario's)
	compress time.Duration // with short: each contender's run, warm-up included (0: shortRun)
	variants variants
}

// variants are extra gateway contenders running the capacity strategy with
// the given strategy_settings, after a '|' extra queue fields, after a
// second '|' the upstream's health fields, and after a third its retry
// fields in place of the default ones
// (-capacity 'NAME=probe_interval: 1, tolerance: 3',
// -capacity 'NAME=|lifo_after: 100ms',
// -capacity 'NAME=||passive: {eject_for: 1s}' or
// -capacity 'NAME=|||on: [connect_error, 503, timeout], try_timeout: auto'),
// so a knob's effect is measured in the same interleaved run as the
// defaults.
type variants []variant

type variant struct{ name, settings, queue, health, retry string }

func (v *variants) String() string { return fmt.Sprint(*v) }

func (v *variants) Set(s string) error {
	name, set, ok := strings.Cut(s, "=")
	if !ok || strings.TrimSpace(name) == "" || strings.TrimSpace(set) == "" {
		return fmt.Errorf("want NAME=SETTINGS[|QUEUE[|HEALTH[|RETRY]]] (YAML flow mapping fields, e.g. probe1=probe_interval: 1, lifo=|lifo_after: 100ms, passive=||passive: {eject_for: 1s} or try=|||on: [connect_error, 503, timeout], try_timeout: auto), got %q", s)
	}
	set, queue, _ := strings.Cut(set, "|")
	queue, health, _ := strings.Cut(queue, "|")
	health, retry, _ := strings.Cut(health, "|")
	*v = append(*v, variant{strings.TrimSpace(name), strings.TrimSpace(set), strings.TrimSpace(queue), strings.TrimSpace(health), strings.TrimSpace(retry)})
	return nil
}

func main() {
	var o options
	flag.StringVar(&o.scenario, "scenario", "", "scenario file (YAML; see contest/scenarios)")
	flag.BoolVar(&o.short, "short", false, fmt.Sprintf("compress the scenario's timeline to %v per contender (smoke test)", shortRun))
	flag.StringVar(&o.out, "out", "", "directory for <scenario>.json and <scenario>.svg (none when empty)")
	flag.StringVar(&o.only, "only", "", "run only the contenders whose name matches this regular expression")
	flag.BoolVar(&o.install, "install", false, "apt-get install nginx, haproxy and caddy when missing")
	flag.StringVar(&o.fulcrum, "fulcrum", "", "fulcrum binary to use (default: build ../cmd/fulcrum)")
	flag.BoolVar(&o.verbose, "v", false, "print library and gateway contenders' per-target limits every half second (the gateways' from their admin API), and the library's state at the end")
	flag.IntVar(&o.rounds, "rounds", 1, "run every contender this many times (rotating the order) and keep each one's best run")
	flag.DurationVar(&o.compress, "compress", 0, "compress the scenario's timeline to this long per contender, warm-up included (a longer -short; implies it)")
	flag.IntVar(&o.gateways, "gateways", 0, "fleet mode: run this many instances of every contender but the oracle, the load spread evenly across them (overrides the scenario's gateways)")
	flag.Var(&o.variants, "capacity", "add a gateway contender \"fulcrum capacity (NAME)\" with these capacity strategy_settings, after a '|' queue fields, after a second '|' health fields, after a third retry fields: NAME=SETTINGS[|QUEUE[|HEALTH[|RETRY]]], e.g. 'probe1=probe_interval: 1', 'lifo=|lifo_after: 100ms', 'passive=||passive: {eject_for: 1s}' or 'try=|||on: [connect_error, 503, timeout], try_timeout: auto' (repeatable)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if _, err := run(ctx, o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "contest:", err)
		os.Exit(1)
	}
}

// run runs one scenario with o and prints to w.
func run(ctx context.Context, o options, w io.Writer) (*Report, error) {
	if o.scenario == "" {
		return nil, errors.New("-scenario is required")
	}
	sc, err := LoadScenario(o.scenario)
	if err != nil {
		return nil, err
	}
	if o.gateways != 0 {
		sc.Gateways = o.gateways
		if err := sc.Validate(); err != nil {
			return nil, fmt.Errorf("-gateways: %w", err)
		}
	}
	if o.compress < 0 {
		return nil, fmt.Errorf("-compress: %v is negative", o.compress)
	}
	if o.short || o.compress > 0 {
		o.short = true
		to := shortRun
		if o.compress > 0 {
			to = o.compress
		}
		total := sc.Load.Warmup.D() + sc.Load.Duration.D()
		if total > to {
			sc = sc.Scaled(float64(to) / float64(total))
		}
	}
	var only *regexp.Regexp
	if o.only != "" {
		if only, err = regexp.Compile(o.only); err != nil {
			return nil, fmt.Errorf("-only: %w", err)
		}
	}
	if o.install {
		if err := installPeers(os.Stderr); err != nil {
			fmt.Fprintln(w, "warning:", err)
		}
	}
	tmp, err := os.MkdirTemp("", "contest-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	env := &runEnv{dir: tmp, log: w, verbose: o.verbose, fulcrum: o.fulcrum}
	cs := contenders()
	for _, v := range o.variants {
		cs = append(cs, contender{Name: "fulcrum capacity (" + v.name + ")", Kind: "fulcrum", start: gatewayContender("capacity", false, v)})
	}
	if env.fulcrum == "" && needsGateway(cs, only) {
		fmt.Fprintln(w, "building the fulcrum binary...")
		if env.fulcrum, err = buildFulcrum(tmp); err != nil {
			fmt.Fprintln(w, "warning: the gateway contenders will be skipped:", err)
		}
	}
	fmt.Fprintf(w, "scenario %s: %d providers, %s, %d gateway(s) per contender, warm-up %v, measured %v, theoretical max %.0f\n",
		sc.Name, len(sc.Providers), loadWords(sc.Load), sc.fleet(), sc.Load.Warmup.D(), sc.Load.Duration.D(), sc.TheoreticalMax())
	rep, err := runAll(ctx, sc, o.short, o.rounds, cs, only, env)
	if err != nil {
		return rep, err
	}
	printTable(w, rep)
	printStages(w, rep)
	if o.out != "" {
		if err := os.MkdirAll(o.out, 0o755); err != nil {
			return rep, err
		}
		base := filepath.Join(o.out, sc.Name)
		if err := writeJSON(base+".json", rep); err != nil {
			return rep, err
		}
		if err := writeSVG(base+".svg", rep); err != nil {
			return rep, err
		}
		if err := os.WriteFile(base+".md", []byte(markdownTable(rep)+"\n"+markdownStages(rep)), 0o644); err != nil {
			return rep, err
		}
		fmt.Fprintf(w, "wrote %s.json, %s.svg, %s.md\n", base, base, base)
		for i := range rep.Records {
			if r := &rep.Records[i]; r.Contender == timelineRow && r.Timeline != nil {
				if err := writeTimelineSVG(base+"-timeline.svg", rep, r); err != nil {
					return rep, err
				}
				fmt.Fprintf(w, "wrote %s-timeline.svg (%s)\n", base, r.Contender)
			}
		}
	}
	return rep, nil
}

// timelineRow is the contender whose per-target timeline is drawn: the
// learner, in process (the gateway's limits are not visible from outside).
const timelineRow = "library capacity (learned)"

// loadWords says what the load is: so many connections, or open-loop
// arrivals at the stages' rates.
func loadWords(l Load) string {
	if !l.open() {
		return fmt.Sprintf("%d connections", l.Connections)
	}
	var rs []string
	for _, r := range l.Rate {
		rs = append(rs, fmt.Sprintf("%g/s from %v", r.RPS, r.At.D()))
	}
	return "open-loop arrivals " + strings.Join(rs, ", ") + fmt.Sprintf(" (timeout %v)", l.timeout())
}

func needsGateway(cs []contender, only *regexp.Regexp) bool {
	for _, c := range cs {
		if c.Kind == "fulcrum" && (only == nil || only.MatchString(c.Name)) {
			return true
		}
	}
	return false
}
