package httpload

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"
)

// conn is one keep-alive connection of a driver, opened again when the
// server closes it.
type conn struct {
	target string
	nc     net.Conn // nil: closed
	br     *bufio.Reader
	reused bool  // nc has been answered before
	dials  int64 // connections opened since the count was last taken
}

func (c *conn) close() {
	if c.nc != nil {
		_ = c.nc.Close()
		c.nc = nil
	}
}

// do sends req and reads its answer by deadline, and returns its status
// code. A connection that served earlier requests and fails before the
// answer begins was most likely closed by the server while idle: the
// request is sent once more, on a new connection.
func (c *conn) do(req []byte, head bool, deadline time.Time) (int, error) {
	for retried := false; ; retried = true {
		if c.nc == nil {
			if err := c.dial(deadline); err != nil {
				return 0, err
			}
		}
		reused := c.reused
		code, begun, err := c.exchange(req, head, deadline)
		if err == nil {
			return code, nil
		}
		c.close()
		if begun || !reused || retried || errors.Is(err, os.ErrDeadlineExceeded) {
			return 0, err
		}
	}
}

func (c *conn) dial(deadline time.Time) error {
	nc, err := (&net.Dialer{Deadline: deadline}).Dial("tcp", c.target)
	if err != nil {
		return err
	}
	c.nc, c.reused = nc, false
	c.dials++
	if c.br == nil {
		c.br = bufio.NewReaderSize(nc, 16<<10)
	} else {
		c.br.Reset(nc)
	}
	return nil
}

// exchange writes req and reads its answer; begun tells whether any of
// the answer had come when it failed.
func (c *conn) exchange(req []byte, head bool, deadline time.Time) (code int, begun bool, err error) {
	if err := c.nc.SetDeadline(deadline); err != nil {
		return 0, false, err
	}
	if _, err := c.nc.Write(req); err != nil {
		return 0, false, err
	}
	if _, err := c.br.Peek(1); err != nil {
		return 0, false, err
	}
	code, keep, err := readResponse(c.br, head)
	if err != nil {
		return 0, true, err
	}
	c.reused = true
	if !keep {
		c.close()
	}
	return code, true, nil
}

// readResponse reads an answer from br, skipping interim (1xx) answers,
// and discards its body. keep is false when the connection cannot carry
// another request: the server said so, or the body ran to the end of the
// connection.
func readResponse(br *bufio.Reader, head bool) (code int, keep bool, err error) {
	for {
		line, err := readLine(br)
		if err != nil {
			return 0, false, err
		}
		code, http10, ok := parseStatusLine(line)
		if !ok {
			return 0, false, fmt.Errorf("httpload: malformed status line %q", line)
		}
		f, err := readHeader(br)
		if err != nil {
			return 0, false, err
		}
		switch {
		case code == 101:
			return 0, false, errors.New("httpload: the server switched protocols (101)")
		case code < 200:
			continue // the answer follows
		}
		keep = !f.close && (!http10 || f.keepAlive)
		switch {
		case head || code == 204 || code == 304:
		case f.chunked:
			err = discardChunked(br)
		case f.length >= 0:
			_, err = br.Discard(int(f.length))
		default:
			_, err = io.Copy(io.Discard, br)
			keep = false
		}
		return code, keep, err
	}
}

// readLine returns the next line of br without its line break; the slice
// is valid until the next read.
func readLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	switch {
	case errors.Is(err, bufio.ErrBufferFull):
		return nil, fmt.Errorf("httpload: a line of the answer is longer than %d bytes", br.Size())
	case errors.Is(err, io.EOF):
		return nil, io.ErrUnexpectedEOF
	case err != nil:
		return nil, err
	}
	line = line[:len(line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, nil
}

// parseStatusLine reads "HTTP/1.x NNN reason".
func parseStatusLine(line []byte) (code int, http10, ok bool) {
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' || (len(line) > 12 && line[12] != ' ') {
		return 0, false, false
	}
	if line[7] != '0' && line[7] != '1' {
		return 0, false, false
	}
	n, ok := parseUint(line[9:12], 10)
	if !ok || n < 100 {
		return 0, false, false
	}
	return int(n), line[7] == '0', true
}

// framing is what an answer's header says of its body and connection.
type framing struct {
	length           int64 // Content-Length; -1 when absent
	chunked          bool
	close, keepAlive bool // Connection: close, keep-alive
}

var (
	hContentLength    = []byte("content-length")
	hTransferEncoding = []byte("transfer-encoding")
	hConnection       = []byte("connection")
)

// readHeader reads header (or trailer) fields up to the empty line.
func readHeader(br *bufio.Reader) (framing, error) {
	f := framing{length: -1}
	for {
		line, err := readLine(br)
		if err != nil {
			return f, err
		}
		if len(line) == 0 {
			return f, nil
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return f, fmt.Errorf("httpload: malformed header line %q", line)
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, hContentLength):
			n, ok := parseUint(value, 10)
			if !ok {
				return f, fmt.Errorf("httpload: malformed Content-Length %q", value)
			}
			f.length = n
		case bytes.EqualFold(name, hTransferEncoding):
			f.chunked = hasToken(value, "chunked")
		case bytes.EqualFold(name, hConnection):
			f.close = f.close || hasToken(value, "close")
			f.keepAlive = f.keepAlive || hasToken(value, "keep-alive")
		}
	}
}

// hasToken reports whether the comma-separated list v holds tok, in any
// case.
func hasToken(v []byte, tok string) bool {
	for len(v) > 0 {
		var item []byte
		item, v, _ = bytes.Cut(v, []byte(","))
		if bytes.EqualFold(bytes.TrimSpace(item), []byte(tok)) {
			return true
		}
	}
	return false
}

// discardChunked reads a chunked body and its trailer, keeping nothing.
func discardChunked(br *bufio.Reader) error {
	for {
		line, err := readLine(br)
		if err != nil {
			return err
		}
		size, _, _ := bytes.Cut(line, []byte(";")) // chunk extensions
		n, ok := parseUint(bytes.TrimSpace(size), 16)
		if !ok {
			return fmt.Errorf("httpload: malformed chunk size %q", line)
		}
		if n == 0 {
			_, err := readHeader(br)
			return err
		}
		if _, err := br.Discard(int(n)); err != nil {
			return err
		}
		if end, err := readLine(br); err != nil {
			return err
		} else if len(end) != 0 {
			return fmt.Errorf("httpload: chunk of %d bytes not followed by a line break", n)
		}
	}
}

// parseUint reads 1 to 15 digits of base 10 or 16.
func parseUint(b []byte, base int64) (int64, bool) {
	if len(b) == 0 || len(b) > 15 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		var d int64
		switch {
		case '0' <= c && c <= '9':
			d = int64(c - '0')
		case base == 16 && 'a' <= c|0x20 && c|0x20 <= 'f':
			d = int64(c|0x20-'a') + 10
		default:
			return 0, false
		}
		n = n*base + d
	}
	return n, true
}
