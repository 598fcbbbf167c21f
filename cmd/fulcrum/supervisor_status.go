package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/fulcrum-lb/fulcrum/supervisor"
)

// newSupervisorStatusCmd returns `fulcrum supervisor status`: the admin
// API's GET /status as a table.
func newSupervisorStatusCmd() *cobra.Command {
	var (
		base, token string
		asJSON      bool
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Print a running supervisor's workers, loads, deficit and sink counters",
		Long: `Ask a running supervisor's admin API (GET /status) and print its phase, role,
workers with their loads, the deficit (holdings missing to give every task k
holders) and the sink's counters.

The token can also come from the environment variable FULCRUM_TOKEN.`,
		Example: "  fulcrum supervisor status --url http://127.0.0.1:7300 --token T",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if token == "" {
				token = os.Getenv("FULCRUM_TOKEN")
			}
			if !strings.HasPrefix(base, "http://") && !strings.HasPrefix(base, "https://") {
				return fmt.Errorf("supervisor status: --url: %q has no http:// or https:// scheme: give http://%s", base, strings.TrimPrefix(base, "//"))
			}
			req, err := http.NewRequestWithContext(commandContext(cmd), http.MethodGet, strings.TrimSuffix(base, "/")+"/status", nil)
			if err != nil {
				return fmt.Errorf("supervisor status: --url: %w", err)
			}
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
			if err != nil {
				return fmt.Errorf("supervisor status: %w", err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
			if err != nil {
				return fmt.Errorf("supervisor status: %w", err)
			}
			if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
				what := "refused the token"
				if token == "" {
					what = "wants a token"
				}
				return fmt.Errorf("supervisor status: %s answered %s: the supervisor %s: give its token with --token or FULCRUM_TOKEN", req.URL, resp.Status, what)
			}
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("supervisor status: %s answered %s: %s", req.URL, resp.Status, strings.TrimSpace(string(body)))
			}
			if asJSON {
				_, err := cmd.OutOrStdout().Write(body)
				return err
			}
			var st supervisor.Status
			if err := json.Unmarshal(body, &st); err != nil {
				return fmt.Errorf("supervisor status: %s: %w", req.URL, err)
			}
			return printStatus(cmd.OutOrStdout(), &st)
		},
	}
	f := cmd.Flags()
	f.StringVar(&base, "url", "http://127.0.0.1:7300", "the supervisor's admin address")
	f.StringVar(&token, "token", "", "the supervisor's token (or FULCRUM_TOKEN)")
	f.BoolVar(&asJSON, "json", false, "print the JSON as the API gives it")
	return cmd
}

func printStatus(w io.Writer, st *supervisor.Status) error {
	role := st.Role
	if st.Term > 0 {
		role += fmt.Sprintf(" (term %d)", st.Term)
	}
	if st.Role == "standby" && st.Leader != "" {
		role += ", leader at " + st.Leader
	}
	fmt.Fprintf(w, "phase %s, role %s\n", st.Phase, role)
	fmt.Fprintf(w, "tasks %d, redundancy %d, deficit %d tasks / %d holdings missing\n",
		st.Tasks, st.Redundancy, st.Deficit.Tasks, st.Deficit.Holders)
	fmt.Fprintf(w, "sink %s: offered %d, published %d, dropped %d, pending %d\n",
		st.Sink.Type, st.Sink.Offered, st.Sink.Published, st.Sink.Dropped, st.Sink.Pending)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKER\tCONNECTED\tLOAD\tMAX LOAD\tFREE\t")
	for _, wk := range st.Workers {
		conn, note := "no", ""
		if wk.Connected {
			conn = "yes"
		}
		if wk.Draining {
			note = "draining"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\n", wk.ID, conn, wk.Load, wk.MaxLoad, wk.Free, note)
	}
	return tw.Flush()
}
