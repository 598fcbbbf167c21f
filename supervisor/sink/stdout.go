package sink

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"unicode/utf8"
)

// stdoutDialer writes one JSON object per line to w (os.Stdout when nil):
// {"task_id":…,"message_id":…,"data":…}. Data that is not JSON is written as
// a JSON string.
func stdoutDialer(w io.Writer) dialFunc {
	if w == nil {
		w = os.Stdout
	}
	return func(context.Context) (publisher, error) {
		return &stdoutPub{w: bufio.NewWriterSize(w, 64<<10)}, nil
	}
}

type stdoutPub struct {
	w    *bufio.Writer
	line []byte
}

// publish writes the lines by hand rather than with encoding/json, which
// would check and compact the data a second time: it was the larger part
// of the publish path's cost (BenchmarkPublishPath).
func (p *stdoutPub) publish(_ context.Context, batch []Message) ([]Message, int, error) {
	for i, m := range batch {
		l := append(p.line[:0], `{"task_id":`...)
		l = appendJSONString(l, m.TaskID)
		if m.MessageID != "" {
			l = append(l, `,"message_id":`...)
			l = appendJSONString(l, m.MessageID)
		}
		l = append(l, `,"data":`...)
		switch {
		case !json.Valid(m.Data):
			l = appendJSONString(l, string(m.Data))
		case bytes.ContainsAny(m.Data, "\r\n"):
			// Valid but over several lines: compacted, so a line is one
			// message (a raw newline can only be between tokens).
			var b bytes.Buffer
			_ = json.Compact(&b, m.Data)
			l = append(l, b.Bytes()...)
		default:
			l = append(l, m.Data...)
		}
		l = append(l, "}\n"...)
		p.line = l
		if _, err := p.w.Write(l); err != nil {
			return batch[i:], 0, err
		}
	}
	if err := p.w.Flush(); err != nil {
		// What reached the writer is unknown; send the batch again.
		return batch, 0, err
	}
	return nil, 0, nil
}

// appendJSONString appends s as a JSON string: quotes, backslashes and
// control characters escaped, invalid UTF-8 replaced by U+FFFD (as
// encoding/json does), <, > and & left as they are.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c == '\n':
				b = append(b, '\\', 'n')
			case c == '\r':
				b = append(b, '\\', 'r')
			case c == '\t':
				b = append(b, '\\', 't')
			case c < 0x20:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, `\ufffd`...)
		} else if r == '\u2028' || r == '\u2029' {
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
		} else {
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}

func (p *stdoutPub) close() error { return p.w.Flush() }
