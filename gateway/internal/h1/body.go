package h1

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// ErrBadChunk is a malformed chunked body.
var ErrBadChunk = errors.New("h1: malformed chunked body")

// fill makes at least one byte buffered in src, first flushing dst when
// src has nothing buffered (so a stream's bytes leave as they come: no
// response waits in our buffer for more input).
func fill(dst *bufio.Writer, src *bufio.Reader) (int, error) {
	if k := src.Buffered(); k > 0 {
		return k, nil
	}
	if dst.Buffered() > 0 {
		if err := dst.Flush(); err != nil {
			return 0, &WriteError{err}
		}
	}
	if _, err := src.Peek(1); err != nil {
		return 0, err
	}
	return src.Buffered(), nil
}

// WriteError marks a failure writing to the destination, so callers can
// tell which side broke.
type WriteError struct{ Err error }

func (e *WriteError) Error() string { return "write: " + e.Err.Error() }
func (e *WriteError) Unwrap() error { return e.Err }

// CopyN relays exactly n bytes from src to dst.
func CopyN(dst *bufio.Writer, src *bufio.Reader, n int64) error {
	for n > 0 {
		k, err := fill(dst, src)
		if err != nil {
			if err == io.EOF {
				return io.ErrUnexpectedEOF
			}
			return err
		}
		if int64(k) > n {
			k = int(n)
		}
		b, _ := src.Peek(k)
		if _, err := dst.Write(b); err != nil {
			return &WriteError{err}
		}
		_, _ = src.Discard(k)
		n -= int64(k)
	}
	return nil
}

// CopyEOF relays src to dst until src ends.
func CopyEOF(dst *bufio.Writer, src *bufio.Reader) error {
	for {
		k, err := fill(dst, src)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		b, _ := src.Peek(k)
		if _, err := dst.Write(b); err != nil {
			return &WriteError{err}
		}
		_, _ = src.Discard(k)
	}
}

// CopyChunked relays a chunked body as is (sizes, extensions, trailers),
// parsing only enough to find its end.
func CopyChunked(dst *bufio.Writer, src *bufio.Reader) error {
	for {
		if _, err := fill(dst, src); err != nil {
			return eof(err)
		}
		line, err := src.ReadSlice('\n')
		if err != nil {
			if errors.Is(err, bufio.ErrBufferFull) {
				return ErrBadChunk
			}
			return eof(err)
		}
		size, ok := chunkSize(line)
		if !ok {
			return ErrBadChunk
		}
		if _, err := dst.Write(line); err != nil {
			return &WriteError{err}
		}
		if size == 0 {
			// Trailers, then the blank line.
			for {
				line, err := src.ReadSlice('\n')
				if err != nil {
					if errors.Is(err, bufio.ErrBufferFull) {
						return ErrBadChunk
					}
					return eof(err)
				}
				if _, err := dst.Write(line); err != nil {
					return &WriteError{err}
				}
				if len(bytes.TrimRight(line, "\r\n")) == 0 {
					return nil
				}
			}
		}
		if err := CopyN(dst, src, size); err != nil {
			return err
		}
		line, err = src.ReadSlice('\n')
		if err != nil {
			return eof(err)
		}
		if len(bytes.TrimRight(line, "\r\n")) != 0 {
			return ErrBadChunk
		}
		if _, err := dst.Write(line); err != nil {
			return &WriteError{err}
		}
	}
}

func eof(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

func chunkSize(line []byte) (int64, bool) {
	line = bytes.TrimRight(line, "\r\n")
	if i := bytes.IndexByte(line, ';'); i >= 0 {
		line = line[:i]
	}
	line = trimOWS(line)
	if len(line) == 0 || len(line) > 15 {
		return 0, false
	}
	var n int64
	for _, c := range line {
		switch {
		case '0' <= c && c <= '9':
			n = n<<4 | int64(c-'0')
		case 'a' <= c && c <= 'f':
			n = n<<4 | int64(c-'a'+10)
		case 'A' <= c && c <= 'F':
			n = n<<4 | int64(c-'A'+10)
		default:
			return 0, false
		}
	}
	return n, true
}

// Discard skips n bytes of src (a retried response's small body).
func Discard(src *bufio.Reader, n int64) error {
	for n > 0 {
		k := int(min(n, 1<<30))
		d, err := src.Discard(k)
		n -= int64(d)
		if err != nil {
			return eof(err)
		}
	}
	return nil
}

// The chunked body decoded, for a destination that frames bodies its own
// way (HTTP/2, or net/http's writer): ChunkSize, the data (CopyN),
// ChunkEnd, and after the last chunk, Trailers.

// ChunkSize reads a chunk-size line (extensions ignored); 0 is the last
// chunk.
func ChunkSize(src *bufio.Reader) (int64, error) {
	line, err := src.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return 0, ErrBadChunk
		}
		return 0, eof(err)
	}
	n, ok := chunkSize(line)
	if !ok {
		return 0, ErrBadChunk
	}
	return n, nil
}

// ChunkEnd reads the line break that ends a chunk's data.
func ChunkEnd(src *bufio.Reader) error {
	line, err := src.ReadSlice('\n')
	if err != nil {
		return eof(err)
	}
	if len(bytes.TrimRight(line, "\r\n")) != 0 {
		return ErrBadChunk
	}
	return nil
}

// Trailers reads the trailer section after the last chunk, up to its
// blank line, passing each well-formed field to fn (its slices are valid
// only during the call); malformed ones are skipped, as a trailer is
// advice that the body, already relayed, does not depend on.
func Trailers(src *bufio.Reader, fn func(name, value []byte)) error {
	for {
		line, err := src.ReadSlice('\n')
		if err != nil {
			if errors.Is(err, bufio.ErrBufferFull) {
				return ErrBadChunk
			}
			return eof(err)
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			return nil
		}
		c := bytes.IndexByte(line, ':')
		if c <= 0 || !isToken(line[:c]) {
			continue
		}
		if v := trimOWS(line[c+1:]); validValue(v) {
			fn(line[:c], v)
		}
	}
}
