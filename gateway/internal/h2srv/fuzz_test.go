package h2srv

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// FuzzH2Server feeds arbitrary bytes after the preface and a SETTINGS
// frame: whatever the frames and header blocks, the server answers or
// ends the connection, and never panics nor hangs.
func FuzzH2Server(f *testing.F) {
	var buf bytes.Buffer
	fr := http2.NewFramer(&buf, nil)
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, h := range []hpack.HeaderField{{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "https"},
		{Name: ":path", Value: "/"}, {Name: ":authority", Value: "x"}, {Name: "content-length", Value: "4"}} {
		_ = enc.WriteField(h)
	}
	_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true})
	_ = fr.WriteData(1, true, []byte("body"))
	f.Add(bytes.Clone(buf.Bytes()))
	buf.Reset()
	_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: hb.Bytes(), EndStream: true})
	_ = fr.WriteContinuation(3, true, hb.Bytes())
	_ = fr.WriteRSTStream(3, http2.ErrCodeCancel)
	_ = fr.WriteWindowUpdate(0, 1<<30)
	_ = fr.WritePing(false, [8]byte{})
	f.Add(bytes.Clone(buf.Bytes()))
	f.Fuzz(func(t *testing.T, in []byte) {
		s := &Server{Handler: echo, Log: discardLog()}
		cli, srv := net.Pipe()
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.serve(srv, srv, &tls.ConnectionState{}, ConnOptions{Idle: time.Second, Preface: time.Second, Send: time.Second})
		}()
		go func() { _, _ = io.Copy(io.Discard, cli) }()
		var pre bytes.Buffer
		pre.WriteString(http2.ClientPreface)
		_ = http2.NewFramer(&pre, nil).WriteSettings()
		_ = cli.SetWriteDeadline(time.Now().Add(2 * time.Second))
		_, _ = cli.Write(pre.Bytes())
		_, _ = cli.Write(in)
		cli.Close()
		<-done
		s.Shutdown() // its parked workers end
	})
}

// echo exercises the response paths too: a body read, written twice
// around a flush (windows, frames), a trailer.
var echo = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Trailer", "X-T")
	b, _ := io.ReadAll(io.LimitReader(r.Body, 1<<16))
	_, _ = w.Write(b)
	w.(http.Flusher).Flush()
	_, _ = w.Write(b)
	w.Header().Set("X-T", "1")
})
