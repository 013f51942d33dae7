package qstashdev

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// lanClient sends plain-http deliveries over connections it owns, one
// request at a time per connection, from the calling worker goroutine.
//
// Why not net/http.Transport: it runs a read loop and a write loop
// goroutine per connection and hands every request and response between
// them and the caller over channels, plus a context and a URL parse per
// request. On loopback, where a relay benchmark lives, those hand-offs cost
// about as much CPU as the request itself. A worker that owns its
// connection needs none of them.
//
// It is used only for the default client, for http URLs without userinfo,
// and when no proxy is configured for the host; everything else (https, proxies, a
// Config.Client) goes through net/http.
type lanClient struct {
	maxIdle int // per host
	dialer  net.Dialer

	mu      sync.Mutex
	idle    map[string][]*lanConn // by host:port
	active  map[*lanConn]struct{}
	direct  map[string]bool // host → no proxy configured
	closed  bool
	proxyFn func(*http.Request) (*url.URL, error)
}

type lanConn struct {
	key     string
	nc      net.Conn
	br      *bufio.Reader
	bw      *bufio.Writer
	scratch []byte // for draining bodies without io.CopyN's allocation
}

func newLANClient(maxIdle int) *lanClient {
	return &lanClient{
		maxIdle: maxIdle,
		dialer:  net.Dialer{KeepAlive: 30 * time.Second},
		idle:    make(map[string][]*lanConn),
		active:  make(map[*lanConn]struct{}),
		direct:  make(map[string]bool),
		proxyFn: http.ProxyFromEnvironment,
	}
}

// handles reports whether u goes through this client.
func (c *lanClient) handles(u *url.URL) bool {
	if u.Scheme != "http" || u.User != nil { // net/http turns userinfo into Basic auth
		return false
	}
	c.mu.Lock()
	direct, ok := c.direct[u.Host]
	c.mu.Unlock()
	if ok {
		return direct
	}
	p, err := c.proxyFn(&http.Request{URL: u})
	direct = err == nil && p == nil
	c.mu.Lock()
	c.direct[u.Host] = direct
	c.mu.Unlock()
	return direct
}

// hostPort is u's dial address.
func hostPort(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	return net.JoinHostPort(u.Hostname(), "80")
}

// get takes an idle connection to key, or dials one. fresh skips the
// pool: the retry after a stale connection must not meet another one.
func (c *lanClient) get(ctx context.Context, key string, deadline time.Time, fresh bool) (*lanConn, bool, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, false, net.ErrClosed
	}
	if list := c.idle[key]; len(list) > 0 && !fresh {
		lc := list[len(list)-1]
		list[len(list)-1] = nil
		c.idle[key] = list[:len(list)-1]
		c.active[lc] = struct{}{}
		c.mu.Unlock()
		return lc, true, nil
	}
	c.mu.Unlock()
	dctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	nc, err := c.dialer.DialContext(dctx, "tcp", key)
	if err != nil {
		return nil, false, err
	}
	lc := &lanConn{key: key, nc: nc, br: bufio.NewReaderSize(nc, 4096), bw: bufio.NewWriterSize(nc, 4096), scratch: make([]byte, 512)}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		nc.Close()
		return nil, false, net.ErrClosed
	}
	c.active[lc] = struct{}{}
	c.mu.Unlock()
	return lc, false, nil
}

// dropIdle closes every idle connection to key. One stale connection means
// the peer closed it while it sat in the pool, and the usual cause (the
// consumer restarted, or a proxy in front of it dropped its connections)
// kills its pool-mates too: without this, each of them would cost a
// delivery one more failed round trip.
func (c *lanClient) dropIdle(key string) {
	c.mu.Lock()
	list := c.idle[key]
	delete(c.idle, key)
	c.mu.Unlock()
	for _, lc := range list {
		lc.nc.Close()
	}
}

// put returns a healthy connection to the pool, or closes it.
func (c *lanClient) put(lc *lanConn, reusable bool) {
	c.mu.Lock()
	delete(c.active, lc)
	if reusable && !c.closed && len(c.idle[lc.key]) < c.maxIdle {
		c.idle[lc.key] = append(c.idle[lc.key], lc)
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	lc.nc.Close()
}

// close closes every connection; requests in flight fail at once.
func (c *lanClient) close() {
	c.mu.Lock()
	c.closed = true
	var all []*lanConn
	for _, list := range c.idle {
		all = append(all, list...)
	}
	for lc := range c.active {
		all = append(all, lc)
	}
	c.idle, c.active = nil, nil
	c.mu.Unlock()
	for _, lc := range all {
		lc.nc.Close()
	}
}

// errStaleConn marks a failure on a reused connection that proves the
// peer had closed it before the request could be answered: the write
// failed, or the peer hung up (EOF, reset) before a single response byte.
// A stale connection is not the destination's answer, so it is retried at
// once on a fresh connection and never charged as a failed attempt (which
// would cost the message QStash's 12s first backoff).
//
// Why the retry is safe: when the write fails, the peer did not receive a
// whole request, and a consumer that verifies the signature (whose body
// claim covers every byte) cannot act on part of one. When the request was
// written in full and the peer closed without answering, it may have
// processed it (say, committed and then exited); net/http would retry such
// a POST only if marked idempotent. A delivery is at-least-once whatever
// the transport does (QStash retries a failed attempt with the same
// message id, and consumers dedupe on the event's id), so one immediate
// duplicate is within the contract. The retry happens once, on a
// connection dialed for it, so a peer that keeps hanging up is charged
// like any other failure.
var errStaleConn = errors.New("stale keep-alive connection")

// peerClosed reports the errors of a connection the peer closed or reset.
// A timeout is not one of them: the peer may be working on the request.
func peerClosed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, syscall.ECONNABORTED)
}

// lanRequest is one delivery attempt for lanClient.
type lanRequest struct {
	u      *url.URL
	method string
	fixed  []string    // name, value pairs written first (QStash's own headers)
	header http.Header // forwarded headers
	body   []byte
	// wantBody reports whether the response body is kept (for a callback
	// or the DLQ); it is read up to maxBody, and the rest drained, either
	// way.
	wantBody func(status int) bool
	maxBody  int64
}

// do sends one request and reads the response.
func (c *lanClient) do(ctx context.Context, r *lanRequest, timeout time.Duration) (attemptResult, error) {
	deadline := time.Now().Add(timeout)
	key := hostPort(r.u)
	res, err := c.once(ctx, key, r, deadline, false)
	if errors.Is(err, errStaleConn) {
		c.dropIdle(key)
		res, err = c.once(ctx, key, r, deadline, true)
	}
	return res, err
}

func (c *lanClient) once(ctx context.Context, key string, r *lanRequest, deadline time.Time, fresh bool) (attemptResult, error) {
	lc, reused, err := c.get(ctx, key, deadline, fresh)
	if err != nil {
		return attemptResult{}, err
	}
	if err := lc.nc.SetDeadline(deadline); err != nil {
		c.put(lc, false)
		return attemptResult{}, err
	}
	writeRequest(lc.bw, r)
	if err := lc.bw.Flush(); err != nil {
		c.put(lc, false)
		if reused && peerClosed(err) {
			return attemptResult{}, errStaleConn
		}
		return attemptResult{}, err
	}
	// Wait for the first response byte on its own: only a hang-up before
	// it marks the connection stale; after it, the peer was answering.
	if _, err := lc.br.Peek(1); err != nil {
		c.put(lc, false)
		if reused && peerClosed(err) {
			return attemptResult{}, errStaleConn
		}
		return attemptResult{}, err
	}
	var req *http.Request
	if r.method == http.MethodHead {
		req = &http.Request{Method: r.method} // a HEAD response has no body
	}
	var resp *http.Response
	for {
		resp, err = http.ReadResponse(lc.br, req)
		if err != nil {
			c.put(lc, false)
			return attemptResult{}, err
		}
		// Skip informational responses (103 Early Hints and the like).
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
	}
	res := attemptResult{status: resp.StatusCode, header: resp.Header}
	if r.wantBody(resp.StatusCode) {
		if res.body, err = io.ReadAll(io.LimitReader(resp.Body, r.maxBody)); err != nil {
			c.put(lc, false)
			return attemptResult{}, err
		}
	}
	complete := drain(resp.Body, lc.scratch, 1<<20)
	resp.Body.Close()
	c.put(lc, complete && !resp.Close && resp.StatusCode != http.StatusSwitchingProtocols)
	return res, nil
}

// drain reads and discards up to limit bytes, reporting whether the body
// ended: only then can the connection carry the next request.
func drain(r io.Reader, buf []byte, limit int) bool {
	for n := 0; n <= limit; {
		m, err := r.Read(buf)
		n += m
		if err == io.EOF {
			return true
		}
		if err != nil {
			return false
		}
	}
	return false
}

// writeRequest writes an HTTP/1.1 request. Header names and values were
// checked at publish time (checkHeaders); the framing headers a user could
// forward are skipped, as net/http skips them, because this writer sets
// them.
func writeRequest(bw *bufio.Writer, r *lanRequest) {
	bw.WriteString(r.method)
	bw.WriteByte(' ')
	bw.WriteString(r.u.RequestURI())
	bw.WriteString(" HTTP/1.1\r\nHost: ")
	bw.WriteString(r.u.Host)
	bw.WriteString("\r\nContent-Length: ")
	var num [20]byte
	bw.Write(strconv.AppendInt(num[:0], int64(len(r.body)), 10))
	bw.WriteString("\r\n")
	for i := 0; i+1 < len(r.fixed); i += 2 {
		writeHeaderLine(bw, r.fixed[i], r.fixed[i+1])
	}
	for k, vs := range r.header {
		switch k {
		case "Host", "Content-Length", "Transfer-Encoding", "Trailer", "Connection":
			continue
		}
		if isFixedHeader(k, r.fixed) {
			continue // QStash's own value wins, as in the net/http path
		}
		for _, v := range vs {
			writeHeaderLine(bw, k, v)
		}
	}
	bw.WriteString("\r\n")
	bw.Write(r.body)
}

func writeHeaderLine(bw *bufio.Writer, k, v string) {
	bw.WriteString(k)
	bw.WriteString(": ")
	bw.WriteString(v)
	bw.WriteString("\r\n")
}

func isFixedHeader(k string, fixed []string) bool {
	for i := 0; i < len(fixed); i += 2 {
		if fixed[i] == k {
			return true
		}
	}
	return false
}
