package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/fulcrum-lb/fulcrum/flow"
	"github.com/fulcrum-lb/fulcrum/flow/client"
)

// The operator's commands: register a type, pause and resume it, and
// retry, cancel or delete a task.

func flowRegisterCmd() *cobra.Command {
	var (
		f                                         flowClientFlags
		tt                                        flow.TaskType
		interval, processing, retry, maxRetryIntv time.Duration
		cronCtx                                   string
		weights                                   map[string]int
	)
	cmd := &cobra.Command{
		Use:   "register TYPE",
		Short: "Create or update a task type (fields left out take the server's defaults)",
		Example: `  fulcrum flow register video --max-retry 3 --retry-interval 2s --max-processing 2m
  fulcrum flow register report --cron "0 6 * * *" --cron-stage build --cron-context '{"kind":"daily"}'
  fulcrum flow register export --fair --fairness-weight acme=3 --fairness-weight globex=2`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, d := range []struct {
				flag string
				v    time.Duration
			}{{"--schedule-interval", interval}, {"--max-processing", processing}, {"--retry-interval", retry}, {"--max-retry-interval", maxRetryIntv}} {
				if d.v < 0 {
					return fmt.Errorf("%s: %v is negative", d.flag, d.v)
				}
			}
			tt.TaskType = args[0]
			if tt.RateLimitPerSecond < 0 {
				return fmt.Errorf("--rate-limit: %v is negative", tt.RateLimitPerSecond)
			}
			for k, w := range weights {
				if k == "" || w < 1 {
					return fmt.Errorf("--fairness-weight %s=%d: want KEY=WEIGHT, a key and a weight of at least 1", k, w)
				}
			}
			if len(weights) > 0 {
				tt.FairnessWeights = weights
			}
			if cronCtx != "" {
				if !json.Valid([]byte(cronCtx)) {
					return fmt.Errorf("--cron-context: not valid JSON: %q", cronCtx)
				}
				tt.CronContext = json.RawMessage(cronCtx)
			}
			tt.ScheduleIntervalMS, tt.MaxProcessingMS = interval.Milliseconds(), processing.Milliseconds()
			tt.RetryIntervalMS, tt.MaxRetryIntervalMS = retry.Milliseconds(), maxRetryIntv.Milliseconds()
			return f.with(func(c *client.Client) error {
				if err := c.RegisterTask(cmd.Context(), tt); err != nil {
					return err
				}
				got, err := c.GetTaskType(cmd.Context(), tt.TaskType)
				if err != nil {
					return err
				}
				return printType(cmd, f.output, got)
			})
		},
	}
	f.add(cmd)
	fl := cmd.Flags()
	fl.IntVar(&tt.ScheduleLimit, "schedule-limit", 0, "most tasks one hold returns (default 100)")
	fl.DurationVar(&interval, "schedule-interval", 0, "how often workers pull (default 1s)")
	fl.DurationVar(&processing, "max-processing", 0, "lease length (default 1m)")
	fl.IntVar(&tt.MaxRetryNum, "max-retry", 0, "retries per stage")
	fl.DurationVar(&retry, "retry-interval", 0, "delay before the first retry, doubled per retry (default 1s)")
	fl.DurationVar(&maxRetryIntv, "max-retry-interval", 0, "cap of the doubling (default 5m)")
	fl.StringVar(&tt.Cron, "cron", "", `make the type periodic: 5-field cron in UTC ("*/5 * * * *") or @hourly, @daily...; each tick creates one task`)
	fl.StringVar(&tt.CronStage, "cron-stage", "", "stage of the tasks --cron creates")
	fl.StringVar(&cronCtx, "cron-context", "", "task_context (JSON) of the tasks --cron creates")
	fl.Float64Var(&tt.RateLimitPerSecond, "rate-limit", 0, "most tasks held a second per rate_key, across servers (0: no limit)")
	fl.BoolVar(&tt.Fair, "fair", false, "share each hold across the fairness keys with due tasks, by weight, instead of by due time alone")
	fl.StringToIntVar(&weights, "fairness-weight", nil, "KEY=WEIGHT, a fairness key's weight with --fair (1 to 1000; keys not named weigh 1); repeat for more keys")
	return cmd
}

// flowTypeCmd is `type TYPE`: a type's settings and its paused rate keys.
func flowTypeCmd() *cobra.Command {
	var f flowClientFlags
	cmd := &cobra.Command{
		Use:   "type TYPE",
		Short: "Show a task type's settings and the rate keys paused now, until when",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.with(func(c *client.Client) error {
				t, err := c.GetTaskType(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				return printType(cmd, f.output, t)
			})
		},
	}
	f.add(cmd)
	return cmd
}

func printType(cmd *cobra.Command, output string, t *flow.TaskType) error {
	if output == "json" {
		return printJSON(cmd.OutOrStdout(), t)
	}
	state := "active"
	if t.Paused {
		state = "paused"
	}
	_, err := fmt.Fprintf(cmd.OutOrStdout(), "%s %s: schedule_limit=%d schedule_interval=%v max_processing=%v max_retry=%d retry_interval=%v max_retry_interval=%v",
		t.TaskType, state, t.ScheduleLimit, ms(t.ScheduleIntervalMS), ms(t.MaxProcessingMS), t.MaxRetryNum, ms(t.RetryIntervalMS), ms(t.MaxRetryIntervalMS))
	if err == nil && t.Cron != "" {
		_, err = fmt.Fprintf(cmd.OutOrStdout(), " cron=%q cron_stage=%s", t.Cron, t.CronStage)
	}
	if err == nil && t.RateLimitPerSecond > 0 {
		_, err = fmt.Fprintf(cmd.OutOrStdout(), " rate_limit=%g/s", t.RateLimitPerSecond)
	}
	if err == nil && t.Fair {
		_, err = fmt.Fprint(cmd.OutOrStdout(), " fair")
		keys := slices.Sorted(maps.Keys(t.FairnessWeights))
		for i, k := range keys {
			if err == nil {
				sep := ","
				if i == 0 {
					sep = " fairness_weights="
				}
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s%s:%d", sep, k, t.FairnessWeights[k])
			}
		}
	}
	if err == nil {
		_, err = fmt.Fprintln(cmd.OutOrStdout())
	}
	for _, k := range t.PausedKeys {
		if err == nil {
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "  rate_key %q paused until %s\n", k.RateKey, k.Until.Format(time.RFC3339Nano))
		}
	}
	return err
}

func ms(v int64) time.Duration { return time.Duration(v) * time.Millisecond }

// flowPauseCmd is `pause TYPE` (pause true) or `resume TYPE`.
func flowPauseCmd(pause bool) *cobra.Command {
	var f flowClientFlags
	use, short := "resume TYPE", "Let a paused task type's tasks be held again"
	if pause {
		use, short = "pause TYPE", "Stop handing out a task type's tasks (on every server) until resume"
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.with(func(c *client.Client) error {
				op := c.ResumeTaskType
				if pause {
					op = c.PauseTaskType
				}
				t, err := op(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				return printType(cmd, f.output, t)
			})
		},
	}
	f.add(cmd)
	return cmd
}

func flowRetryCmd() *cobra.Command {
	var (
		f     flowClientFlags
		stage string
		ctx   string
	)
	cmd := &cobra.Command{
		Use:   "retry TASK_ID...",
		Short: "Put failed or cancelled tasks back to pending, retries reset (stage and context kept unless given)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := flow.RetryTaskRequest{TaskStage: stage}
			if ctx != "" {
				if !json.Valid([]byte(ctx)) {
					return fmt.Errorf("--context: not valid JSON: %q", ctx)
				}
				req.TaskContext = json.RawMessage(ctx)
			}
			return f.with(func(c *client.Client) error {
				return eachTask(cmd, args, func(id string) error {
					req.TaskID = id
					t, err := c.RetryTask(cmd.Context(), req)
					if err == nil {
						fmt.Fprintf(cmd.OutOrStdout(), "%s %s stage=%s\n", t.TaskID, t.Status, t.TaskStage)
					}
					return err
				})
			})
		},
	}
	f.add(cmd)
	cmd.Flags().StringVar(&stage, "stage", "", "run this stage instead of the one the task stopped at")
	cmd.Flags().StringVar(&ctx, "context", "", "replace the task_context (JSON)")
	return cmd
}

func flowCancelCmd() *cobra.Command {
	return flowEachTaskCmd("cancel", "End pending or processing tasks as cancelled", "cancelled",
		func(ctx context.Context, c *client.Client, id string) error { return c.CancelTask(ctx, id) })
}

func flowDeleteCmd() *cobra.Command {
	return flowEachTaskCmd("delete", "Delete tasks that are not being processed (cancel a held one first)", "deleted",
		func(ctx context.Context, c *client.Client, id string) error { return c.DeleteTask(ctx, id) })
}

// flowWorkerGoneCmd declares workers dead (POST /v1/worker_gone): what each
// holds is rescued at once instead of when its leases run out.
func flowWorkerGoneCmd() *cobra.Command {
	var f flowClientFlags
	cmd := &cobra.Command{
		Use:   "worker-gone WORKER_ID...",
		Short: "Declare workers dead: every task each holds is rescued now (a retry counted, or failed), without waiting for its lease",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.with(func(c *client.Client) error {
				return eachID(cmd, args, "workers", func(id string) error {
					n, err := c.WorkerGone(cmd.Context(), id)
					if err == nil {
						fmt.Fprintf(cmd.OutOrStdout(), "%s rescued=%d\n", id, n)
					}
					return err
				})
			})
		},
	}
	f.add(cmd)
	return cmd
}

// flowEachTaskCmd is a command that applies op to every task id it is given
// and prints "<id> <done>" for each that succeeded.
func flowEachTaskCmd(name, short, done string, op func(context.Context, *client.Client, string) error) *cobra.Command {
	var f flowClientFlags
	cmd := &cobra.Command{
		Use:   name + " TASK_ID...",
		Short: short,
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.with(func(c *client.Client) error {
				return eachTask(cmd, args, func(id string) error {
					err := op(cmd.Context(), c, id)
					if err == nil {
						fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", id, done)
					}
					return err
				})
			})
		},
	}
	f.add(cmd)
	return cmd
}

// eachTask runs op for every id, reporting each failure and going on; the
// command fails when any did.
func eachTask(cmd *cobra.Command, ids []string, op func(id string) error) error {
	return eachID(cmd, ids, "tasks", func(id string) error {
		if err := flow.ValidateTaskID("task id", id); err != nil {
			return err
		}
		return op(id)
	})
}

// eachID runs op for every id, reports each failure on stderr under its
// id and goes on; the error counts the failures ("2 of 5 tasks failed").
func eachID(cmd *cobra.Command, ids []string, noun string, op func(id string) error) error {
	failed := 0
	for _, id := range ids {
		if err := op(id); err != nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "%s: %v\n", id, err)
			failed++
		}
	}
	if failed > 0 {
		return errors.New(fmt.Sprint(failed, " of ", len(ids), " ", noun, " failed"))
	}
	return nil
}
