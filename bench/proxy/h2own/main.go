// Command h2own is a floor for an HTTP/2 server of our own, beside
// gobare (net/http's HTTP/2 server) and nginxbare (nginx's): it answers
// every request itself, as a demo upstream does (same status, headers and
// body as gobare), with one goroutine per connection, no goroutine or
// channel per stream, and one flush per batch of frames read (it writes
// while the client's frames are buffered and flushes before a read that
// would wait). Frames and HPACK are golang.org/x/net/http2's. It keeps
// the protocol's rules a load generator relies on (SETTINGS and PING
// acknowledged, both flow-control windows respected, request bodies
// credited back, RST_STREAM and GOAWAY honoured) and no more: it is a
// measurement of what the design costs, not a server to deploy (no
// stream limits enforced, no priorities, no timeouts).
package main

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"flag"
	"io"
	"log"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

var body = []byte("upstream-1\n")

func main() {
	listen := flag.String("listen", "127.0.0.1:18087", "address")
	certFile := flag.String("cert", "", "certificate file (PEM)")
	keyFile := flag.String("key", "", "key file (PEM)")
	flag.Parse()
	cert, err := tls.LoadX509KeyPair(*certFile, *keyFile)
	if err != nil {
		log.Fatal(err)
	}
	ln, err := tls.Listen("tcp", *listen, &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}})
	if err != nil {
		log.Fatal(err)
	}
	go tickDate()
	for {
		c, err := ln.Accept()
		if err != nil {
			log.Fatal(err)
		}
		go serve(c)
	}
}

// date is the Date header net/http sends, made once a second.
var date atomic.Value

func tickDate() {
	for {
		date.Store(time.Now().UTC().Format(http1Time))
		time.Sleep(time.Second)
	}
}

const http1Time = "Mon, 02 Jan 2006 15:04:05 GMT"

// conn is one client connection's state.
type conn struct {
	fr       *http2.Framer
	hbuf     bytes.Buffer
	enc      *hpack.Encoder
	connWin  int64            // what the client lets us send on the connection
	initWin  int64            // its SETTINGS_INITIAL_WINDOW_SIZE
	win      map[uint32]int64 // per stream, for the streams with data waiting
	waiting  []uint32         // streams whose body waits for a window, in order
	received int64            // request body bytes not credited back yet
}

func serve(nc net.Conn) {
	defer nc.Close()
	tc := nc.(*tls.Conn)
	if err := tc.Handshake(); err != nil || tc.ConnectionState().NegotiatedProtocol != "h2" {
		return
	}
	br := bufio.NewReaderSize(nc, 32<<10)
	bw := bufio.NewWriterSize(nc, 32<<10)
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(br, preface); err != nil || string(preface) != http2.ClientPreface {
		return
	}
	c := &conn{fr: http2.NewFramer(bw, br), connWin: 65535, initWin: 65535, win: map[uint32]int64{}}
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.fr.MaxHeaderListSize = 64 << 10
	c.enc = hpack.NewEncoder(&c.hbuf)
	if c.fr.WriteSettings(http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: 250}) != nil {
		return
	}
	for {
		if br.Buffered() == 0 {
			// Nothing more to read without waiting: send what the
			// frames read so far produced, as one write.
			if bw.Flush() != nil {
				return
			}
		}
		f, err := c.fr.ReadFrame()
		if err != nil {
			return
		}
		if !c.handle(f) {
			return
		}
	}
}

// handle answers one frame; false ends the connection.
func (c *conn) handle(f http2.Frame) bool {
	switch f := f.(type) {
	case *http2.SettingsFrame:
		if f.IsAck() {
			return true
		}
		_ = f.ForeachSetting(func(s http2.Setting) error {
			if s.ID == http2.SettingInitialWindowSize {
				d := int64(s.Val) - c.initWin
				c.initWin = int64(s.Val)
				for id := range c.win {
					c.win[id] += d
				}
			}
			return nil
		})
		return c.fr.WriteSettingsAck() == nil && c.drain()
	case *http2.PingFrame:
		if f.IsAck() {
			return true
		}
		return c.fr.WritePing(true, f.Data) == nil
	case *http2.WindowUpdateFrame:
		if f.StreamID == 0 {
			c.connWin += int64(f.Increment)
		} else if _, ok := c.win[f.StreamID]; ok {
			c.win[f.StreamID] += int64(f.Increment)
		}
		return c.drain()
	case *http2.MetaHeadersFrame:
		if f.StreamEnded() {
			return c.respond(f.StreamID)
		}
		return true // the body's last DATA frame ends the stream
	case *http2.DataFrame:
		// Credit request bodies back in batches, as servers do.
		if c.received += int64(f.Length); c.received >= 16<<10 {
			if c.fr.WriteWindowUpdate(0, uint32(c.received)) != nil {
				return false
			}
			c.received = 0
		}
		if f.StreamEnded() {
			return c.respond(f.StreamID)
		}
		// And the stream's window, or a body past its initial 64 KiB
		// would stall (the load's GETs send none).
		if f.Length > 0 && c.fr.WriteWindowUpdate(f.StreamID, f.Length) != nil {
			return false
		}
		return true
	case *http2.RSTStreamFrame:
		delete(c.win, f.StreamID)
		return true
	case *http2.GoAwayFrame:
		return false
	}
	return true
}

// respond writes the demo upstream's answer on stream id: the head at
// once, the body when both windows allow it.
func (c *conn) respond(id uint32) bool {
	c.hbuf.Reset()
	d, _ := date.Load().(string)
	for _, h := range [...]hpack.HeaderField{
		{Name: ":status", Value: "200"},
		{Name: "content-type", Value: "text/plain; charset=utf-8"},
		{Name: "x-upstream", Value: "upstream-1"},
		{Name: "content-length", Value: strconv.Itoa(len(body))},
		{Name: "date", Value: d},
	} {
		_ = c.enc.WriteField(h)
	}
	if c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.hbuf.Bytes(), EndHeaders: true}) != nil {
		return false
	}
	c.win[id] = c.initWin
	c.waiting = append(c.waiting, id)
	return c.drain()
}

// drain sends the bodies waiting, in order, while the windows allow.
func (c *conn) drain() bool {
	n := int64(len(body))
	for len(c.waiting) > 0 {
		id := c.waiting[0]
		w, ok := c.win[id]
		if ok && (w < n || c.connWin < n) {
			return true // wait for a WINDOW_UPDATE
		}
		c.waiting = c.waiting[1:]
		if !ok {
			continue // reset meanwhile
		}
		delete(c.win, id)
		c.connWin -= n
		if c.fr.WriteData(id, true, body) != nil {
			return false
		}
	}
	return true
}
