package flow

import (
	"encoding/json"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

func TestValidateContextRefusesLoneSurrogates(t *testing.T) {
	for _, c := range []struct {
		in  string
		bad bool
	}{
		{`{"a":"\ud83d\ude00"}`, false},      // a pair: 😀
		{`{"a":"\uD83D\uDE00x"}`, false},     // upper-case hex
		{`{"a":"\\ud800"}`, false},           // an escaped backslash, then text
		{`{"\\":"\u00e9\u0041"}`, false},     // not surrogates
		{`{"a":"\ud800"}`, true},             // high alone at the end
		{`{"a":"\ud800x"}`, true},            // high then text
		{`{"a":"\ud800\u0041"}`, true},       // high then not a low
		{`{"a":"\ud800\ud800\udc00"}`, true}, // high then a pair
		{`{"a":"\udc00"}`, true},             // low alone
		{`["ok", {"k\udfff":1}]`, true},      // in a key
		{`{"a":"\"\ud800"}`, true},           // after an escaped quote
	} {
		_, err := ValidateContext("task_context", json.RawMessage(c.in))
		if got := err != nil; got != c.bad {
			t.Errorf("%s: err = %v, want refused %v", c.in, err, c.bad)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "task_context: lone UTF-16 surrogate") {
			t.Errorf("%s: err = %v, want it to name the field and the surrogate", c.in, err)
		}
	}
}

// Whatever encoding/json writes for a valid string is never refused.
func TestLoneSurrogateNeverFlagsMarshalledText(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := rapid.String().Draw(t, "s")
		b, _ := json.Marshal(map[string]string{s: s})
		if off := loneSurrogate(b); off >= 0 {
			t.Fatalf("%s flagged at %d", b, off)
		}
		// The same text with non-ASCII written as \u escapes (pairs for
		// astral runes) is not flagged either.
		var e strings.Builder
		e.WriteByte('"')
		for _, r := range s {
			switch {
			case r >= 0x10000:
				r -= 0x10000
				e.WriteString(`\u` + hex4s(0xD800+(r>>10)) + `\u` + hex4s(0xDC00+(r&0x3FF)))
			case r < 0x20 || r > 0x7e || r == '"' || r == '\\':
				e.WriteString(`\u` + hex4s(r))
			default:
				e.WriteRune(r)
			}
		}
		e.WriteByte('"')
		if !json.Valid([]byte(e.String())) {
			t.Fatalf("test built invalid JSON %s", e.String())
		}
		if off := loneSurrogate([]byte(e.String())); off >= 0 {
			t.Fatalf("%s flagged at %d", e.String(), off)
		}
	})
}

func hex4s(r rune) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[r>>12&15], digits[r>>8&15], digits[r>>4&15], digits[r&15]})
}

func TestCronValidation(t *testing.T) {
	for _, c := range []struct {
		tt   TaskType
		want string
	}{
		{TaskType{TaskType: "t", Cron: "61 * * * *"}, `cron: "61 * * * *": end of range (61) above maximum (59)`},
		{TaskType{TaskType: "t", Cron: "* * * *"}, "cron"},
		{TaskType{TaskType: "t", Cron: "CRON_TZ=Europe/Paris * * * * *"}, "time zones are not taken"},
		{TaskType{TaskType: "t", Cron: "@every 1m"}, "@every is not a cron schedule"},
		{TaskType{TaskType: "t", Cron: "0 0 30 2 *"}, "never fires"},
		{TaskType{TaskType: "t", CronStage: "s"}, "cron: required with cron_stage or cron_context"},
		{TaskType{TaskType: "t", Cron: "@daily", CronContext: []byte(`{"a":`)}, "cron_context: not valid JSON"},
		{TaskType{TaskType: "t", Cron: "@daily", CronStage: "a b"}, "cron_stage"},
	} {
		_, err := NormalizeTaskType(c.tt)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.tt, err, c.want)
		}
	}
	if _, err := NormalizeTaskType(TaskType{TaskType: "t", Cron: "*/5 9-17 * * 1-5", CronStage: "s", CronContext: []byte(`{"a":1}`)}); err != nil {
		t.Fatal(err)
	}
}
