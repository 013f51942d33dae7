package chaos_test

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"
)

// gate is a network partition that drops no byte and resets nothing:
// while it is cut, bytes either way are held (as TCP keeps retransmitting
// unacknowledged segments into a black hole), no end sees an error, and
// reads wait; once it heals, what was held is delivered in order, even
// to a peer whose other side has given up and closed meanwhile, as a
// retransmission that finally gets through would be.
type gate struct {
	mu   sync.Mutex
	open chan struct{} // closed while traffic flows
	cuts int
}

func newGate() *gate {
	g := &gate{open: make(chan struct{})}
	close(g.open)
	return g
}

// cut starts the partition.
func (g *gate) cut() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
		g.open = make(chan struct{})
		g.cuts++
	default:
	}
}

// heal ends it.
func (g *gate) heal() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
	default:
		close(g.open)
	}
}

func (g *gate) wait(ctx context.Context) error {
	g.mu.Lock()
	ch := g.open
	g.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// pipe copies src to dst through g until src ends, then half-closes dst.
// done ends it early (the test is over).
func (g *gate) pipe(ctx context.Context, dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if g.wait(ctx) != nil {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if g.wait(ctx) != nil {
				return
			}
			if cw, ok := dst.(interface{ CloseWrite() error }); ok && err == io.EOF {
				_ = cw.CloseWrite()
			} else {
				_ = dst.Close()
			}
			return
		}
	}
}

// splice runs both directions of a connection through g and closes both
// ends when both are done or ctx ends.
func (g *gate) splice(ctx context.Context, a, b net.Conn, wg *sync.WaitGroup) {
	var both sync.WaitGroup
	both.Add(2)
	go func() { defer both.Done(); g.pipe(ctx, b, a) }()
	go func() { defer both.Done(); g.pipe(ctx, a, b) }()
	wg.Add(1)
	go func() {
		defer wg.Done()
		stop := context.AfterFunc(ctx, func() { _ = a.Close(); _ = b.Close() })
		both.Wait()
		stop()
		_ = a.Close()
		_ = b.Close()
	}()
}

// blackholeProxy forwards TCP connections to target through a gate: a
// client of the proxy is cut off from target, without a reset, whenever
// the gate is cut.
type blackholeProxy struct {
	*gate
	ln     net.Listener
	target string
	ctx    context.Context
	wg     sync.WaitGroup
}

func newBlackholeProxy(t *testing.T, target string) *blackholeProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &blackholeProxy{gate: newGate(), ln: ln, target: target, ctx: ctx}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		cancel()
		_ = ln.Close()
		p.wg.Wait()
	})
	return p
}

func (p *blackholeProxy) addr() *net.TCPAddr { return p.ln.Addr().(*net.TCPAddr) }

func (p *blackholeProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		var d net.Dialer
		up, err := d.DialContext(p.ctx, "tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.splice(p.ctx, c, up, &p.wg)
	}
}

// gatedDialer returns a dialer (for kgo.Dialer) whose connections run
// through g: the client side of a partition between one client and its
// brokers. Its goroutines end with ctx.
func gatedDialer(ctx context.Context, g *gate, wg *sync.WaitGroup) func(ctx context.Context, network, host string) (net.Conn, error) {
	return func(dctx context.Context, network, host string) (net.Conn, error) {
		var d net.Dialer
		up, err := d.DialContext(dctx, network, host)
		if err != nil {
			return nil, err
		}
		client, mine := net.Pipe()
		g.splice(ctx, mine, up, wg)
		return client, nil
	}
}
