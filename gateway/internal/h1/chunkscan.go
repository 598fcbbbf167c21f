package h1

import "bytes"

// ChunkScan finds the end of a chunked body handed to it in pieces as
// they arrive, for a relay that passes the body through as is (sizes,
// extensions, trailers), as CopyChunked does from a bufio.Reader. The
// event loop uses it: it has bytes, not a reader it may block on.
type ChunkScan struct {
	state uint8
	left  int64  // data bytes left in the current chunk
	line  []byte // a size, CRLF or trailer line split across pieces
}

const (
	scanSize    = iota // reading a chunk-size line
	scanData           // left bytes of data
	scanDataEnd        // the CRLF after a chunk's data
	scanTrailer        // trailer lines, up to the blank one
)

// maxChunkLine bounds a size line with its extensions, and a trailer line.
const maxChunkLine = 4 << 10

// Reset prepares s for a new body.
func (s *ChunkScan) Reset() { s.state, s.left, s.line = scanSize, 0, s.line[:0] }

// Scan consumes b and returns how many of its bytes belong to the body
// (all of b unless the body ends inside it) and whether the body ended.
func (s *ChunkScan) Scan(b []byte) (n int, done bool, err error) {
	for n < len(b) {
		if s.state == scanData {
			k := int(min(s.left, int64(len(b)-n)))
			n += k
			s.left -= int64(k)
			if s.left == 0 {
				s.state = scanDataEnd
			}
			continue
		}
		i := bytes.IndexByte(b[n:], '\n')
		if i < 0 {
			if len(s.line)+len(b)-n > maxChunkLine {
				return n, false, ErrBadChunk
			}
			s.line = append(s.line, b[n:]...)
			return len(b), false, nil
		}
		line := b[n : n+i+1]
		if len(s.line) > 0 {
			if len(s.line)+len(line) > maxChunkLine {
				return n, false, ErrBadChunk
			}
			s.line = append(s.line, line...)
			line = s.line
		}
		n += i + 1
		blank := len(bytes.TrimRight(line, "\r\n")) == 0
		switch s.state {
		case scanSize:
			size, ok := chunkSize(line)
			if !ok {
				return n, false, ErrBadChunk
			}
			s.state, s.left = scanData, size
			if size == 0 {
				s.state = scanTrailer
			}
		case scanDataEnd:
			if !blank {
				return n, false, ErrBadChunk
			}
			s.state = scanSize
		case scanTrailer:
			if blank {
				s.line = s.line[:0]
				return n, true, nil
			}
		}
		s.line = s.line[:0]
	}
	return n, false, nil
}
