package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/fulcrum-lb/fulcrum/flow"
	"github.com/fulcrum-lb/fulcrum/flow/client"
)

// flowClientCmds returns the command-line client (submit, get, ls, stats)
// that newFlowCmd adds beside serve.
func flowClientCmds() []*cobra.Command {
	return []*cobra.Command{flowSubmitCmd(), flowGetCmd(), flowLsCmd(), flowStatsCmd(),
		flowRegisterCmd(), flowTypeCmd(), flowPauseCmd(true), flowPauseCmd(false), flowRetryCmd(), flowCancelCmd(), flowChildrenCmd(), flowDeleteCmd(), flowWorkerGoneCmd()}
}

// flowClientFlags are the flags every client command shares.
type flowClientFlags struct {
	servers []string
	output  string
	timeout time.Duration
	token   string
}

// defaultFlowServers is $FULCRUM_FLOW_SERVER (comma-separated), else the
// local default.
func defaultFlowServers() []string {
	if v := strings.TrimSpace(os.Getenv("FULCRUM_FLOW_SERVER")); v != "" {
		return strings.Split(v, ",")
	}
	return []string{"http://127.0.0.1:7070"}
}

func (f *flowClientFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringSliceVar(&f.servers, "server", defaultFlowServers(), "flow server URL; repeat or comma-separate for several (default $FULCRUM_FLOW_SERVER)")
	cmd.Flags().StringVar(&f.token, "token", "", "API token of the servers (default $FULCRUM_FLOW_TOKEN)")
	cmd.Flags().StringVarP(&f.output, "output", "o", "table", "output format: table or json")
	cmd.Flags().DurationVar(&f.timeout, "timeout", 30*time.Second, "timeout of each request")
}

// with runs fn with a client of the flow server the flags name, closed
// after.
func (f *flowClientFlags) with(fn func(c *client.Client) error) error {
	c, err := f.client()
	if err != nil {
		return err
	}
	defer c.Close()
	return explainAPIError(fn(c))
}

// explainAPIError adds to a refused token what to give: the HTTP header
// the server names is not what a command-line user sets.
func explainAPIError(err error) error {
	var ae *client.APIError
	if errors.As(err, &ae) && (ae.Status == http.StatusUnauthorized || ae.Status == http.StatusForbidden) {
		return fmt.Errorf("%w: give the server's token with --token or FULCRUM_FLOW_TOKEN", err)
	}
	return err
}

func (f *flowClientFlags) client() (*client.Client, error) {
	if f.output != "table" && f.output != "json" {
		return nil, fmt.Errorf("--output: %q is not table or json", f.output)
	}
	if f.token == "" {
		f.token = os.Getenv("FULCRUM_FLOW_TOKEN") // not the flag's default: --help would print it
	}
	return client.New(f.servers, client.Options{Timeout: f.timeout, Token: f.token})
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func flowSubmitCmd() *cobra.Command {
	var (
		f        flowClientFlags
		context  string
		priority int
		delay    time.Duration
		file     string
		batch    int
		unique   string
		seqKey   string
		rateKey  string
		fairKey  string
	)
	cmd := &cobra.Command{
		Use:   "submit [TYPE STAGE]",
		Short: "Create tasks: one from the arguments, or a batch of JSON lines from --file (- for stdin)",
		Example: `  fulcrum flow submit video fetch --context '{"url":"http://example.com/a.mp4"}'
  fulcrum flow submit --file tasks.jsonl     # one {"task_type":..,"task_stage":..,"task_context":{..}} per line`,
		Args: func(cmd *cobra.Command, args []string) error {
			if file == "" && len(args) != 2 {
				return errors.New("submit needs TYPE and STAGE, or --file")
			}
			if file != "" && len(args) != 0 {
				return errors.New("submit takes either TYPE STAGE or --file, not both")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if batch <= 0 {
				return fmt.Errorf("--batch: %d must be positive", batch)
			}
			if delay < 0 {
				return fmt.Errorf("--delay: %v is negative", delay)
			}
			var tasks []flow.NewTask
			if file != "" {
				var in io.Reader = cmd.InOrStdin()
				if file != "-" {
					fh, err := os.Open(file)
					if err != nil {
						return err
					}
					defer fh.Close()
					in = fh
				}
				var err error
				if tasks, err = parseTaskLines(in); err != nil {
					return fmt.Errorf("--file %s: %w", file, err)
				}
				if len(tasks) == 0 {
					return fmt.Errorf("--file %s: no tasks", file)
				}
			} else {
				t := flow.NewTask{TaskType: args[0], TaskStage: args[1], Priority: priority, DelayMS: delay.Milliseconds(), UniqueKey: unique,
					SequenceKey: seqKey, RateKey: rateKey, FairnessKey: fairKey}
				if context != "" {
					if !json.Valid([]byte(context)) {
						return fmt.Errorf("--context: not valid JSON: %q", context)
					}
					t.TaskContext = json.RawMessage(context)
				}
				tasks = []flow.NewTask{t}
			}
			return f.with(func(c *client.Client) error {
				var ids []string
				for start := 0; start < len(tasks); start += batch {
					part := tasks[start:min(start+batch, len(tasks))]
					got, err := c.CreateTasks(cmd.Context(), part)
					if ae := (*client.APIError)(nil); errors.As(err, &ae) && ae.Status == http.StatusNotFound {
						// create_task's only 404: a type never registered.
						typ := "TYPE"
						if len(args) == 2 {
							typ = args[0]
						}
						err = fmt.Errorf("%w: register the type first: fulcrum flow register %s (see fulcrum flow register --help for its retry and schedule settings)", err, typ)
					}
					if err != nil {
						if len(ids) > 0 {
							fmt.Fprintf(cmd.ErrOrStderr(), "created %d tasks before the failure (ids printed below)\n", len(ids))
							printIDs(cmd.OutOrStdout(), f.output, ids)
						}
						return fmt.Errorf("tasks %d-%d: %w", start+1, start+len(part), err)
					}
					ids = append(ids, got...)
				}
				return printIDs(cmd.OutOrStdout(), f.output, ids)
			})
		},
	}
	f.add(cmd)
	cmd.Flags().StringVar(&context, "context", "", "task_context as JSON (at most 4096 bytes)")
	cmd.Flags().IntVar(&priority, "priority", 0, "priority; higher runs earlier")
	cmd.Flags().DurationVar(&delay, "delay", 0, "run no earlier than this from now (e.g. 30s)")
	cmd.Flags().StringVar(&file, "file", "", "read tasks as JSON lines from this file (- for stdin)")
	cmd.Flags().IntVar(&batch, "batch", 500, "tasks per create_task request with --file")
	cmd.Flags().StringVar(&unique, "unique-key", "", "while a task of TYPE with this key is pending or processing, print its id instead of creating another")
	cmd.Flags().StringVar(&seqKey, "sequence-key", "", "run one task of TYPE with this key at a time, in creation order")
	cmd.Flags().StringVar(&rateKey, "rate-key", "", "the upstream the task calls: a worker may pause the key (pause_rate_key_ms), and --rate-limit caps it")
	cmd.Flags().StringVar(&fairKey, "fairness-key", "", "who the task is for (a tenant): a type registered with --fair shares its holds across these keys")
	return cmd
}

func printIDs(w io.Writer, output string, ids []string) error {
	if output == "json" {
		return printJSON(w, flow.CreateTaskResponse{TaskIDs: ids})
	}
	for _, id := range ids {
		if _, err := fmt.Fprintln(w, id); err != nil {
			return err
		}
	}
	return nil
}

// parseTaskLines reads one flow.NewTask per non-blank line. An error names
// the line and what is wrong with it; nothing is returned then.
func parseTaskLines(r io.Reader) ([]flow.NewTask, error) {
	var tasks []flow.NewTask
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var t flow.NewTask
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&t); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		if dec.More() {
			return nil, fmt.Errorf("line %d: more than one JSON value", n)
		}
		switch {
		case t.TaskType == "":
			return nil, fmt.Errorf("line %d: task_type is missing", n)
		case t.TaskStage == "":
			return nil, fmt.Errorf("line %d: task_stage is missing", n)
		case len(t.TaskContext) > flow.MaxContextBytes:
			return nil, fmt.Errorf("line %d: task_context is %d bytes, over the limit of %d", n, len(t.TaskContext), flow.MaxContextBytes)
		case t.DelayMS < 0:
			return nil, fmt.Errorf("line %d: delay_ms %d is negative", n, t.DelayMS)
		}
		tasks = append(tasks, t)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("after line %d: %w", len(tasks), err)
	}
	return tasks, nil
}

func flowGetCmd() *cobra.Command {
	var f flowClientFlags
	cmd := &cobra.Command{
		Use:   "get TASK_ID",
		Short: "Show one task with its schedule log",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.with(func(c *client.Client) error {
				t, err := c.GetTask(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				if f.output == "json" {
					return printJSON(cmd.OutOrStdout(), t)
				}
				return printTask(cmd.OutOrStdout(), t)
			})
		},
	}
	f.add(cmd)
	return cmd
}

func flowChildrenCmd() *cobra.Command {
	var f flowClientFlags
	cmd := &cobra.Command{
		Use:   "children TASK_ID",
		Short: "List a fan-out parent's children: status, stage, error",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.with(func(c *client.Client) error {
				var all []flow.TaskChild
				for cursor := ""; ; {
					page, err := c.GetTaskChildren(cmd.Context(), args[0], cursor, 0)
					if err != nil {
						return err
					}
					all = append(all, page.Children...)
					if cursor = page.NextCursor; cursor == "" {
						break
					}
				}
				if f.output == "json" {
					return printJSON(cmd.OutOrStdout(), flow.TaskChildrenResponse{Children: all})
				}
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "TASK_ID\tTYPE\tSTAGE\tSTATUS\tMODIFIED\tERROR")
				for _, k := range all {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", k.TaskID, k.TaskType, k.TaskStage, statusString(k.Status), fmtTime(k.ModifyTime), k.Error)
				}
				return tw.Flush()
			})
		},
	}
	f.add(cmd)
	return cmd
}

func printTask(out io.Writer, t *flow.Task) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("task_id", t.TaskID)
	row("task_type", t.TaskType)
	row("task_stage", t.TaskStage)
	row("status", statusString(t.Status))
	row("priority", strconv.Itoa(t.Priority))
	row("retries", fmt.Sprintf("%d / %d", t.CrtRetryNum, t.MaxRetryNum))
	row("order_time", fmtTime(t.OrderTime))
	if t.Owner != "" {
		row("owner", t.Owner)
	}
	if t.LeaseExpiry != nil {
		row("lease_expiry", fmtTime(*t.LeaseExpiry))
	}
	row("create_time", fmtTime(t.CreateTime))
	row("modify_time", fmtTime(t.ModifyTime))
	row("task_context", string(t.TaskContext))
	if len(t.Children) > 0 {
		var parts []string
		for _, st := range flow.AllStatuses() {
			if n := t.Children[st.String()]; n > 0 {
				parts = append(parts, fmt.Sprintf("%s %d", st, n))
			}
		}
		row("children", strings.Join(parts, ", "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(t.ScheduleLog) == 0 {
		return nil
	}
	fmt.Fprintln(out, "\nschedule log:")
	tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AT\tEVENT\tSTAGE\tWORKER\tERROR")
	for _, e := range t.ScheduleLog {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", fmtTime(e.At), e.Event, e.Stage, e.Worker, e.Error)
	}
	return tw.Flush()
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05.000")
}

var statusNames = map[flow.Status]string{
	flow.StatusPending: "pending", flow.StatusProcessing: "processing", flow.StatusSuccess: "success",
	flow.StatusFailed: "failed", flow.StatusCancelled: "cancelled", flow.StatusWaiting: "waiting",
}

func statusString(s flow.Status) string {
	if n, ok := statusNames[s]; ok {
		return n
	}
	return strconv.Itoa(int(s))
}

// parseStatus accepts a status name or its number.
func parseStatus(s string) (flow.Status, error) {
	for st, name := range statusNames {
		if strings.EqualFold(s, name) || s == strconv.Itoa(int(st)) {
			return st, nil
		}
	}
	return 0, fmt.Errorf("--status: %q is not one of pending, processing, success, failed, cancelled (or 1-5)", s)
}

func flowLsCmd() *cobra.Command {
	var (
		f                  flowClientFlags
		typ, stage, status string
		limit              int
		cursor             string
		all                bool
	)
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List tasks, filtered by type, status and stage, a page at a time",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			filter := client.ListFilter{TaskType: typ, TaskStage: stage, Limit: limit, Cursor: cursor}
			if limit < 0 {
				return fmt.Errorf("--limit: %d is negative", limit)
			}
			if status != "" {
				st, err := parseStatus(status)
				if err != nil {
					return err
				}
				filter.Status = st
			}
			return f.with(func(c *client.Client) error {
				var tasks []flow.Task
				var next string
				for {
					page, err := c.ListTasks(cmd.Context(), filter)
					if err != nil {
						return err
					}
					tasks = append(tasks, page.Tasks...)
					next = page.NextCursor
					if !all || next == "" {
						break
					}
					filter.Cursor = next
				}
				if f.output == "json" {
					return printJSON(cmd.OutOrStdout(), flow.TaskListResponse{Tasks: tasks, NextCursor: next})
				}
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "TASK_ID\tTYPE\tSTAGE\tSTATUS\tRETRIES\tPRIORITY\tORDER_TIME\tMODIFY_TIME")
				for _, t := range tasks {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%d\t%d\t%s\t%s\n", t.TaskID, t.TaskType, t.TaskStage,
						statusString(t.Status), t.CrtRetryNum, t.MaxRetryNum, t.Priority, fmtTime(t.OrderTime), fmtTime(t.ModifyTime))
				}
				if err := tw.Flush(); err != nil {
					return err
				}
				if next != "" {
					fmt.Fprintf(cmd.ErrOrStderr(), "more: --cursor %s\n", next)
				}
				return nil
			})
		},
	}
	f.add(cmd)
	cmd.Flags().StringVar(&typ, "type", "", "only this task type")
	cmd.Flags().StringVar(&stage, "stage", "", "only this stage")
	cmd.Flags().StringVar(&status, "status", "", "only this status: pending, processing, success, failed, cancelled")
	cmd.Flags().IntVar(&limit, "limit", 0, "tasks per page (0: the server's default)")
	cmd.Flags().StringVar(&cursor, "cursor", "", "continue from this cursor (printed after a page)")
	cmd.Flags().BoolVar(&all, "all", false, "follow cursors and list every page")
	return cmd
}

func flowStatsCmd() *cobra.Command {
	var f flowClientFlags
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Count tasks by type and status",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return f.with(func(c *client.Client) error {
				st, err := c.Stats(cmd.Context())
				if err != nil {
					return err
				}
				if f.output == "json" {
					return printJSON(cmd.OutOrStdout(), st)
				}
				types := append([]flow.TypeStats(nil), st.Types...)
				sort.Slice(types, func(i, j int) bool { return types[i].TaskType < types[j].TaskType })
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', tabwriter.AlignRight)
				cols := []string{"pending", "processing", "success", "failed", "cancelled"}
				fmt.Fprintln(tw, "TYPE\tPENDING\tPROCESSING\tSUCCESS\tFAILED\tCANCELLED\t")
				for _, t := range types {
					name := t.TaskType
					if t.Paused {
						name += " (paused)"
					}
					fmt.Fprintf(tw, "%s\t", name)
					for _, c := range cols {
						fmt.Fprintf(tw, "%d\t", t.Counts[c])
					}
					fmt.Fprintln(tw)
				}
				return tw.Flush()
			})
		},
	}
	f.add(cmd)
	return cmd
}
