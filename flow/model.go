package flow

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/robfig/cron/v3"
)

// Errors callers branch on. Stores and the service wrap them with the task
// id or type name; test with errors.Is.
var (
	// ErrNotFound: no such task.
	ErrNotFound = errors.New("not found")
	// ErrUnknownType: the task type was never registered.
	ErrUnknownType = errors.New("unknown task type")
	// ErrStaleLease: the lease does not match the task's current one (it
	// expired and the task was held again, or the task ended). Nothing changed.
	ErrStaleLease = errors.New("stale lease")
	// ErrConflict: the task is not in a state the operation applies to
	// (retry of a task that has not ended badly, delete of a held task),
	// or its unique key is taken. Nothing changed.
	ErrConflict = errors.New("conflict")
)

// FieldError is a request field with a bad value. The HTTP API answers 400.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// Limits on what clients may send.
const (
	MaxNameLen       = 64    // task_type and task_stage
	MaxWorkerIDLen   = 128   // worker_id
	MaxUniqueKeyLen  = 128   // unique_key
	MaxErrorLen      = 1024  // error text kept in the schedule log (longer is cut)
	MaxScheduleLimit = 10000 // schedule_limit
	MaxBatch         = 1000  // tasks in one create_task or set_tasks, children in one fan-out
	// MaxFanOutDepth is how deep fan-outs nest: a task created by no
	// fan-out is at depth 0, its children at 1; a task at this depth may
	// not fan out (each level multiplies what one cancel or one join
	// touches, and a runaway recursion should stop with a clear error).
	MaxFanOutDepth = 8
	// MaxPriority bounds |priority|; one unit moves order_time one second.
	MaxPriority = 365 * 24 * 3600
	// MaxDelay bounds delay_ms (one year).
	MaxDelay = 365 * 24 * time.Hour
	// ScheduleLogSize is how many schedule log entries a task keeps.
	ScheduleLogSize = 10
	// MaxRequestBytes is the largest request body a full batch needs:
	// MaxBatch items, each a full context, a full error text and 1 KiB for
	// the other fields and their names. Servers refuse larger bodies (413).
	MaxRequestBytes = MaxBatch * (MaxContextBytes + MaxErrorLen + 1024)
)

// Defaults register_task applies to fields left zero.
const (
	DefaultScheduleLimit    = 100
	DefaultScheduleInterval = time.Second
	DefaultMaxProcessing    = 60 * time.Second
	DefaultRetryInterval    = time.Second
	DefaultMaxRetryInterval = 5 * time.Minute
)

var statusNames = map[Status]string{
	StatusPending:    "pending",
	StatusProcessing: "processing",
	StatusSuccess:    "success",
	StatusFailed:     "failed",
	StatusCancelled:  "cancelled",
	StatusWaiting:    "waiting",
}

// String is the status's name (pending, processing, success, failed,
// cancelled, waiting), or its number when unknown.
func (s Status) String() string {
	if n, ok := statusNames[s]; ok {
		return n
	}
	return strconv.Itoa(int(s))
}

// Valid reports whether s is one of the six statuses.
func (s Status) Valid() bool { _, ok := statusNames[s]; return ok }

// Ended reports whether s is final (success, failed, cancelled).
func (s Status) Ended() bool { return s == StatusSuccess || s == StatusFailed || s == StatusCancelled }

// ParseStatus accepts a status name or number.
func ParseStatus(v string) (Status, error) {
	for s, n := range statusNames {
		if n == v {
			return s, nil
		}
	}
	if i, err := strconv.Atoi(v); err == nil && Status(i).Valid() {
		return Status(i), nil
	}
	return 0, fmt.Errorf("unknown status %q (want pending, processing, success, failed, cancelled, waiting or 1-6)", v)
}

// AllStatuses lists the statuses in numeric order.
func AllStatuses() []Status {
	return []Status{StatusPending, StatusProcessing, StatusSuccess, StatusFailed, StatusCancelled, StatusWaiting}
}

func validName(field, v string, required bool) error {
	if v == "" {
		if required {
			return fieldErr(field, "required")
		}
		return nil
	}
	if len(v) > MaxNameLen {
		return fieldErr(field, "%d bytes, at most %d", len(v), MaxNameLen)
	}
	for _, r := range v {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.' || r == ':' || r == '/'
		if !ok {
			return fieldErr(field, "%q has %q; use letters, digits and _ - . : /", v, r)
		}
	}
	return nil
}

// ValidateTaskTypeName checks a task type name.
func ValidateTaskTypeName(v string) error { return validName("task_type", v, true) }

// ValidateStage checks an optional task stage name.
func ValidateStage(field, v string) error { return validName(field, v, false) }

// ValidateWorkerID checks a worker id: required, printable UTF-8, bounded.
func ValidateWorkerID(v string) error {
	switch {
	case v == "":
		return fieldErr("worker_id", "required")
	case len(v) > MaxWorkerIDLen:
		return fieldErr("worker_id", "%d bytes, at most %d", len(v), MaxWorkerIDLen)
	case !utf8.ValidString(v):
		return fieldErr("worker_id", "not valid UTF-8")
	}
	return nil
}

// NormalizeTaskType validates a register_task body and fills zero fields
// with the defaults. max_retry_num 0 means no retries.
func NormalizeTaskType(t TaskType) (TaskType, error) {
	if err := ValidateTaskTypeName(t.TaskType); err != nil {
		return t, err
	}
	if t.Paused {
		return t, fieldErr("paused", "set by POST /v1/pause_task_type, not by register_task")
	}
	if t.PausedKeys != nil {
		return t, fieldErr("paused_keys", "set by set_task with pause_rate_key_ms, not by register_task")
	}
	if !(t.RateLimitPerSecond >= 0 && t.RateLimitPerSecond <= MaxRateLimit) { // NaN fails too
		return t, fieldErr("rate_limit_per_second", "%v: want 0 (no limit) up to %g", t.RateLimitPerSecond, MaxRateLimit)
	}
	if err := validFairness(t); err != nil {
		return t, err
	}
	if t.Cron == "" && (t.CronStage != "" || t.CronContext != nil) {
		return t, fieldErr("cron", "required with cron_stage or cron_context")
	}
	if t.Cron != "" {
		if _, err := ParseCron(t.Cron); err != nil {
			return t, fieldErr("cron", "%q: %v", t.Cron, err)
		}
		if err := validName("cron_stage", t.CronStage, false); err != nil {
			return t, err
		}
		c, err := ValidateContext("cron_context", t.CronContext)
		if err != nil {
			return t, err
		}
		t.CronContext = c
	}
	neg := []struct {
		field string
		v     int64
	}{
		{"schedule_limit", int64(t.ScheduleLimit)},
		{"schedule_interval_ms", t.ScheduleIntervalMS},
		{"max_processing_time_ms", t.MaxProcessingMS},
		{"max_retry_num", int64(t.MaxRetryNum)},
		{"retry_interval_ms", t.RetryIntervalMS},
		{"max_retry_interval_ms", t.MaxRetryIntervalMS},
	}
	for _, f := range neg {
		if f.v < 0 {
			return t, fieldErr(f.field, "%d is negative", f.v)
		}
	}
	if t.ScheduleLimit == 0 {
		t.ScheduleLimit = DefaultScheduleLimit
	}
	if t.ScheduleLimit > MaxScheduleLimit {
		return t, fieldErr("schedule_limit", "%d is over %d", t.ScheduleLimit, MaxScheduleLimit)
	}
	if t.ScheduleIntervalMS == 0 {
		t.ScheduleIntervalMS = DefaultScheduleInterval.Milliseconds()
	}
	if t.MaxProcessingMS == 0 {
		t.MaxProcessingMS = DefaultMaxProcessing.Milliseconds()
	}
	if t.RetryIntervalMS == 0 {
		t.RetryIntervalMS = DefaultRetryInterval.Milliseconds()
	}
	if t.MaxRetryIntervalMS == 0 {
		t.MaxRetryIntervalMS = max(DefaultMaxRetryInterval.Milliseconds(), t.RetryIntervalMS)
	}
	if t.MaxRetryIntervalMS < t.RetryIntervalMS {
		return t, fieldErr("max_retry_interval_ms", "%d is below retry_interval_ms %d", t.MaxRetryIntervalMS, t.RetryIntervalMS)
	}
	if t.MaxRetryNum > 1000 {
		return t, fieldErr("max_retry_num", "%d is over 1000", t.MaxRetryNum)
	}
	day := (24 * time.Hour).Milliseconds()
	for _, f := range []struct {
		field string
		v     int64
	}{{"schedule_interval_ms", t.ScheduleIntervalMS}, {"max_processing_time_ms", t.MaxProcessingMS}, {"retry_interval_ms", t.RetryIntervalMS}, {"max_retry_interval_ms", t.MaxRetryIntervalMS}} {
		if f.v > 7*day {
			return t, fieldErr(f.field, "%d is over 7 days", f.v)
		}
	}
	return t, nil
}

// ValidateContext checks a task_context: at most MaxContextBytes and valid
// JSON. It returns nil for an absent or null context.
func ValidateContext(field string, c json.RawMessage) (json.RawMessage, error) {
	if len(c) == 0 || bytes.Equal(bytes.TrimSpace(c), []byte("null")) {
		return nil, nil
	}
	if len(c) > MaxContextBytes {
		return nil, fieldErr(field, "%d bytes, at most %d", len(c), MaxContextBytes)
	}
	if !utf8.Valid(c) || !json.Valid(c) {
		return nil, fieldErr(field, "not valid JSON")
	}
	if off := loneSurrogate(c); off >= 0 {
		return nil, fieldErr(field, "lone UTF-16 surrogate %s at byte %d; JSON readers cannot decode it", c[off:off+6], off)
	}
	return c, nil
}

// loneSurrogate returns the offset of the first \uD800-\uDFFF escape in
// valid JSON that is not a high surrogate followed by a low one, or -1.
// encoding/json accepts such escapes, but the text they stand for is not
// Unicode, and stricter readers (and PostgreSQL's jsonb) refuse it.
func loneSurrogate(c []byte) int {
	inStr := false
	for i := 0; i < len(c); i++ {
		switch b := c[i]; {
		case !inStr:
			inStr = b == '"'
		case b == '"':
			inStr = false
		case b == '\\':
			if c[i+1] != 'u' { // valid JSON: an escape always has its next byte
				i++
				continue
			}
			r := hex4(c[i+2 : i+6])
			switch {
			case r >= 0xD800 && r < 0xDC00:
				if i+12 > len(c) || c[i+6] != '\\' || c[i+7] != 'u' {
					return i
				}
				if lo := hex4(c[i+8 : i+12]); lo < 0xDC00 || lo > 0xDFFF {
					return i
				}
				i += 11
			case r >= 0xDC00 && r <= 0xDFFF:
				return i
			default:
				i += 5
			}
		}
	}
	return -1
}

func hex4(b []byte) rune {
	var r rune
	for _, c := range b {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c-'a') + 10
		case c >= 'A' && c <= 'F':
			r |= rune(c-'A') + 10
		}
	}
	return r
}

// ValidateNewTask checks one task to create; field names are prefixed with
// prefix (e.g. "tasks[3].") so a batch error says which element.
func ValidateNewTask(prefix string, t *NewTask) error {
	if err := validName(prefix+"task_type", t.TaskType, true); err != nil {
		return err
	}
	if err := validName(prefix+"task_stage", t.TaskStage, false); err != nil {
		return err
	}
	c, err := ValidateContext(prefix+"task_context", t.TaskContext)
	if err != nil {
		return err
	}
	t.TaskContext = c
	switch {
	case len(t.UniqueKey) > MaxUniqueKeyLen:
		return fieldErr(prefix+"unique_key", "%d bytes, at most %d", len(t.UniqueKey), MaxUniqueKeyLen)
	case !utf8.ValidString(t.UniqueKey):
		return fieldErr(prefix+"unique_key", "not valid UTF-8")
	}
	for _, k := range []struct{ field, v string }{{"sequence_key", t.SequenceKey}, {"rate_key", t.RateKey}, {"fairness_key", t.FairnessKey}} {
		if err := validKey(prefix+k.field, k.v); err != nil {
			return err
		}
	}
	if t.Priority > MaxPriority || t.Priority < -MaxPriority {
		return fieldErr(prefix+"priority", "%d is outside ±%d", t.Priority, MaxPriority)
	}
	if t.DelayMS < 0 {
		return fieldErr(prefix+"delay_ms", "%d is negative", t.DelayMS)
	}
	if t.DelayMS > MaxDelay.Milliseconds() {
		return fieldErr(prefix+"delay_ms", "%d is over one year", t.DelayMS)
	}
	return nil
}

// validKey checks a sequence_key or rate_key: optional, UTF-8, at most
// MaxUniqueKeyLen bytes (the index columns' width).
func validKey(field, v string) error {
	switch {
	case len(v) > MaxUniqueKeyLen:
		return fieldErr(field, "%d bytes, at most %d", len(v), MaxUniqueKeyLen)
	case !utf8.ValidString(v):
		return fieldErr(field, "not valid UTF-8")
	}
	return nil
}

// Bounds of fairness_weights: a weight is 1 to MaxFairnessWeight (a
// hold's share is computed in float64 from their sum, which these keep
// exact), and a type lists at most MaxFairnessKeys (the list travels with
// the type's config, which every hold of the type reads from a cache).
const (
	MaxFairnessWeight = 1000
	MaxFairnessKeys   = 1000
)

// validFairness checks fair and fairness_weights.
func validFairness(t TaskType) error {
	if len(t.FairnessWeights) == 0 {
		return nil
	}
	if !t.Fair {
		return fieldErr("fairness_weights", "only with fair: true")
	}
	if len(t.FairnessWeights) > MaxFairnessKeys {
		return fieldErr("fairness_weights", "%d keys, at most %d", len(t.FairnessWeights), MaxFairnessKeys)
	}
	keys := make([]string, 0, len(t.FairnessWeights))
	for k := range t.FairnessWeights {
		keys = append(keys, k)
	}
	sort.Strings(keys) // one answer for one body
	for _, k := range keys {
		w := t.FairnessWeights[k]
		switch {
		case k == "":
			return fieldErr("fairness_weights", "a key is empty; weigh keys that tasks are created with")
		case w < 1 || w > MaxFairnessWeight:
			return fieldErr("fairness_weights", "%q: weight %d, want 1 to %d", k, w, MaxFairnessWeight)
		}
		if err := validKey("fairness_weights", k); err != nil {
			return err
		}
	}
	return nil
}

// MaxRateLimit bounds rate_limit_per_second.
const MaxRateLimit = 1e6

// ValidateSet checks a set_task body (not its effect, which needs the task).
func ValidateSet(prefix string, r *SetTaskRequest) error {
	if err := ValidateTaskID(prefix+"task_id", r.TaskID); err != nil {
		return err
	}
	if r.Lease == "" {
		return fieldErr(prefix+"lease", "required")
	}
	switch r.Status {
	case StatusPending, StatusSuccess, StatusFailed:
		if r.Children != nil {
			return fieldErr(prefix+"children", "only with status 6 (waiting), the fan-out; status is %d", int(r.Status))
		}
		if r.JoinStage != "" {
			return fieldErr(prefix+"join_stage", "only with status 6 (waiting) and children")
		}
	case StatusWaiting:
		if err := validateFanOut(prefix, r); err != nil {
			return err
		}
	default:
		return fieldErr(prefix+"status", "%d; a worker sets pending (1), success (3), failed (4) or waiting (6, with children)", int(r.Status))
	}
	if err := validName(prefix+"task_stage", r.TaskStage, false); err != nil {
		return err
	}
	c, err := ValidateContext(prefix+"task_context", r.TaskContext)
	if err != nil {
		return err
	}
	r.TaskContext = c
	if r.DelayMS < 0 {
		return fieldErr(prefix+"delay_ms", "%d is negative", r.DelayMS)
	}
	if r.DelayMS > MaxDelay.Milliseconds() {
		return fieldErr(prefix+"delay_ms", "%d is over one year", r.DelayMS)
	}
	if len(r.Error) > MaxErrorLen {
		r.Error = truncUTF8(r.Error, MaxErrorLen)
	}
	switch {
	case r.PauseRateKeyMS < 0:
		return fieldErr(prefix+"pause_rate_key_ms", "%d is negative", r.PauseRateKeyMS)
	case r.PauseRateKeyMS > MaxDelay.Milliseconds():
		return fieldErr(prefix+"pause_rate_key_ms", "%d is over one year", r.PauseRateKeyMS)
	case r.PauseRateKeyMS > 0 && r.Status != StatusPending:
		return fieldErr(prefix+"pause_rate_key_ms", "only with status 1 (pending): the task runs again after the pause; status is %d", int(r.Status))
	}
	return nil
}

// validateFanOut checks a set with status waiting: its children and join
// stage (the children's types are the server's to check).
func validateFanOut(prefix string, r *SetTaskRequest) error {
	switch {
	case len(r.Children) == 0:
		return fieldErr(prefix+"children", "required with status 6 (waiting)")
	case len(r.Children) > MaxBatch:
		return fieldErr(prefix+"children", "%d children, at most %d", len(r.Children), MaxBatch)
	case r.JoinStage == "":
		return fieldErr(prefix+"join_stage", "required with children")
	case r.Error != "":
		return fieldErr(prefix+"error", "not with status 6 (waiting)")
	case r.DelayMS != 0:
		return fieldErr(prefix+"delay_ms", "not with status 6 (waiting); give the children delay_ms")
	}
	if err := validName(prefix+"join_stage", r.JoinStage, true); err != nil {
		return err
	}
	for i := range r.Children {
		if err := ValidateNewTask("", &r.Children[i]); err != nil {
			return ValidateNewTask(fmt.Sprintf("%schildren[%d].", prefix, i), &r.Children[i]) // the path only on the way out
		}
		if r.Children[i].UniqueKey != "" {
			return fieldErr(fmt.Sprintf("%schildren[%d].unique_key", prefix, i), "not taken for children: a child is always created")
		}
	}
	return nil
}

func truncUTF8(s string, n int) string {
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// ParseCron parses a periodic type's schedule: 5 fields (minute hour
// day-of-month month day-of-week) or a descriptor (@hourly, @daily, ...),
// always in UTC. Its Next gives the first tick after a time.
func ParseCron(expr string) (cron.Schedule, error) {
	if len(expr) > 128 {
		return nil, fmt.Errorf("%d bytes, at most 128", len(expr))
	}
	if strings.Contains(expr, "TZ=") {
		return nil, errors.New("time zones are not taken; the schedule is in UTC")
	}
	if strings.HasPrefix(expr, "@every") {
		return nil, errors.New("@every is not a cron schedule; use the 5 fields")
	}
	sch, err := cronParser.Parse(expr)
	if err != nil {
		return nil, err
	}
	if sch.Next(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)).IsZero() {
		return nil, errors.New("never fires")
	}
	return sch, nil
}
