// Command ratios runs the peer benchmarks of the bench module (go test
// -bench with -benchmem) and prints, for every shape, our ns/op, each
// peer's, the ratio ours/peer and the allocations, as Markdown tables.
//
// Run it from the bench module:
//
//	cd bench && go run ./cmd/ratios
//	cd bench && go run ./cmd/ratios -benchtime=1s -bench 'Hash' ./balance
//
// Benchmarks are named Benchmark<Group>/<shape...>/<impl>; the impl "ours"
// is compared with every other impl of the same shape.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

func main() {
	benchtime := flag.String("benchtime", "200ms", "go test -benchtime")
	bench := flag.String("bench", ".", "go test -bench pattern")
	count := flag.Int("count", 1, "go test -count; the fastest run of each benchmark is used")
	raw := flag.Bool("raw", false, "also echo go test's output to stderr")
	flag.Parse()
	pkgs := flag.Args()
	if len(pkgs) == 0 {
		pkgs = []string{"./pool", "./balance"}
	}
	if *count < 1 {
		fmt.Fprintln(os.Stderr, "ratios: -count must be at least 1")
		os.Exit(2)
	}
	args := append([]string{"test", "-run", "^$", "-bench", *bench, "-benchmem",
		"-benchtime", *benchtime, "-count", strconv.Itoa(*count)}, pkgs...)
	cmd := exec.Command("go", args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		fatal(err)
	}
	if err := cmd.Start(); err != nil {
		fatal(err)
	}
	var src io.Reader = out
	if *raw {
		src = io.TeeReader(out, os.Stderr)
	}
	results, order, perr := parse(src)
	if err := cmd.Wait(); err != nil {
		fatal(fmt.Errorf("go %s: %w", strings.Join(args, " "), err))
	}
	if perr != nil {
		fatal(perr)
	}
	fmt.Printf("Command: `go %s` (GOMAXPROCS from the benchmark suffix)\n\n", strings.Join(args, " "))
	print(os.Stdout, results, order)
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "ratios:", err)
	os.Exit(1)
}

type result struct {
	ns     float64
	bytes  float64
	allocs float64
}

// key identifies a shape: the benchmark name without its impl.
type key struct{ group, shape string }

var line = regexp.MustCompile(`^Benchmark(\S+?)(?:-\d+)?\s+\d+\s+([\d.]+) ns/op(?:\s+([\d.]+) B/op\s+([\d.]+) allocs/op)?`)

// parse reads go test output into results[shape][impl], keeping the fastest
// of repeated runs, and the order shapes and impls first appeared in.
func parse(r io.Reader) (map[key]map[string]result, []key, error) {
	results := map[key]map[string]result{}
	var order []key
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		m := line.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		parts := strings.Split(m[1], "/")
		if len(parts) < 2 {
			continue // not a peer comparison
		}
		k := key{parts[0], strings.Join(parts[1:len(parts)-1], "/")}
		impl := parts[len(parts)-1]
		var res result
		var err error
		if res.ns, err = strconv.ParseFloat(m[2], 64); err != nil {
			return nil, nil, fmt.Errorf("line %q: %w", sc.Text(), err)
		}
		res.bytes, _ = strconv.ParseFloat(m[3], 64)
		res.allocs, _ = strconv.ParseFloat(m[4], 64)
		if results[k] == nil {
			results[k] = map[string]result{}
			order = append(order, k)
		}
		if old, ok := results[k][impl]; !ok || res.ns < old.ns {
			results[k][impl] = res
		}
	}
	return results, order, sc.Err()
}

func print(w io.Writer, results map[key]map[string]result, order []key) {
	group := ""
	for _, k := range order {
		impls := results[k]
		ours, ok := impls["ours"]
		if !ok {
			continue
		}
		if k.group != group {
			group = k.group
			fmt.Fprintf(w, "\n### %s\n\n", group)
			fmt.Fprintln(w, "| shape | ours ns/op | peer | peer ns/op | ours/peer | ours allocs | peer allocs |")
			fmt.Fprintln(w, "|---|---:|---|---:|---:|---:|---:|")
		}
		for _, name := range peers(impls) {
			peer := impls[name]
			fmt.Fprintf(w, "| %s | %.1f | %s | %.1f | %s | %g | %g |\n",
				k.shape, ours.ns, name, peer.ns, ratio(ours.ns, peer.ns), ours.allocs, peer.allocs)
		}
	}
}

// peers lists the peers of shape k by name.
func peers(impls map[string]result) []string {
	var names []string
	for name := range impls {
		if name != "ours" {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// ratio formats ours/peer; below 1 means ours is faster, and is bolded.
func ratio(ours, peer float64) string {
	if peer == 0 {
		return "n/a"
	}
	r := ours / peer
	if r < 1 {
		return fmt.Sprintf("**%.2f**", r)
	}
	return fmt.Sprintf("%.2f", r)
}
