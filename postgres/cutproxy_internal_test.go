package postgres

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
)

// cutProxy sits between pgx and PostgreSQL and, when armed with a cut,
// stops one statement's round trip at a chosen message: the client's
// request never reaches the server, or the server's reply stops reaching
// the client after a given number of its messages. A test cancels the
// caller's context once the cut is in place and sees what the store makes
// of a round trip that ended there.
//
// It reads the protocol message by message: the client's untyped startup
// message first, then typed messages (one type byte, a four-byte length
// that counts itself, the body) both ways.
type cutProxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup

	mu    sync.Mutex
	cut   *cut
	conns []net.Conn
	// dropCancels makes the proxy hang up on cancel requests instead of
	// passing them on, as if they were lost.
	dropCancels bool
}

// cancelRequestCode opens a cancel request, sent on a connection of its own
// in place of a startup message.
const cancelRequestCode = 80877102

// cut is where to stop a round trip. Statements are told apart by their
// BindComplete ('2'): the server sends one for every statement it
// executes in the extended protocol, which is the only one the store uses
// (preparing a statement, pgx's other round trip, has none).
type cut struct {
	// request holds back the client's first Bind ('B') and everything
	// after it: the statement never reaches the server.
	request bool
	// skip lets this many statements' replies through first (a pipeline's
	// settlement, a claim before its top-up).
	skip int
	// after is how many messages of the statement's reply, counting its
	// BindComplete, reach the client before the rest is held back.
	after int

	// ready is closed once the cut is in place and, for a reply cut,
	// once commit is known (wait) or at once (!wait).
	wait  bool
	ready chan struct{}
	// state, under cutProxy.mu.
	binds, seen int
	holding     bool
	done        bool
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		_ = ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			_ = c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *cutProxy) addr() string { return p.ln.Addr().String() }

// arm sets the next cut; it applies to the next round trip on any
// connection and to one only.
func (p *cutProxy) arm(c *cut) {
	c.ready = make(chan struct{})
	p.mu.Lock()
	p.cut = c
	p.mu.Unlock()
}

// disarm forgets the cut, and reports whether it was ever put in place.
func (p *cutProxy) disarm() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.cut
	p.cut = nil
	return c != nil && c.holding
}

func (p *cutProxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, client, server)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pump(client, server, true)
		go p.pump(server, client, false)
	}
}

// pump copies messages from src to dst until src ends, then closes both.
// Once a cut holds a direction, that connection's messages that way are
// read and dropped: the connection is as good as lost.
func (p *cutProxy) pump(src, dst net.Conn, fromClient bool) {
	defer p.wg.Done()
	defer func() { _ = src.Close(); _ = dst.Close() }()
	r := bufio.NewReader(src)
	startup := fromClient
	var mine *cut // the cut holding this direction, once one does
	for {
		msg, typ, err := readMessage(r, startup)
		if err != nil {
			return
		}
		if startup && len(msg) >= 8 && binary.BigEndian.Uint32(msg[4:8]) == cancelRequestCode {
			p.mu.Lock()
			drop := p.dropCancels
			p.mu.Unlock()
			if drop {
				return
			}
		}
		startup = false
		p.mu.Lock()
		if mine == nil {
			if c := p.cut; c != nil && !c.holding && p.holds(c, fromClient, typ) {
				c.holding, mine = true, c
				if fromClient || !c.wait {
					close(c.ready)
					c.done = true
				}
			}
		}
		if mine != nil && !mine.done && typ == 'Z' {
			// The server ended the transaction: whatever the statement
			// did is committed or rolled back by now.
			close(mine.ready)
			mine.done = true
		}
		p.mu.Unlock()
		if mine != nil && fromClient && typ == 'X' {
			// The client said goodbye (Terminate) on a connection whose
			// requests were held back: hang up, as the server would.
			return
		}
		if mine != nil {
			continue
		}
		if _, err := dst.Write(msg); err != nil {
			return
		}
	}
}

// holds says whether cut c starts holding at a message of type typ going
// one way; it counts the server's messages. Called under p.mu.
func (p *cutProxy) holds(c *cut, fromClient bool, typ byte) bool {
	if c.request {
		return fromClient && typ == 'B'
	}
	if fromClient {
		return false
	}
	if typ == '2' {
		c.binds++
	}
	if c.binds <= c.skip {
		return false
	}
	c.seen++
	return c.seen > c.after
}

// readMessage reads one protocol message, returning its bytes and type
// (0 for the untyped startup message).
func readMessage(r *bufio.Reader, startup bool) ([]byte, byte, error) {
	head := 5
	if startup {
		head = 4
	}
	msg := make([]byte, head)
	if _, err := io.ReadFull(r, msg); err != nil {
		return nil, 0, err
	}
	n := int(binary.BigEndian.Uint32(msg[head-4:]))
	if n < 4 || n > 1<<30 {
		return nil, 0, errors.New("cutproxy: bad message length")
	}
	msg = append(msg, make([]byte, n-4)...)
	if _, err := io.ReadFull(r, msg[head:]); err != nil {
		return nil, 0, err
	}
	if startup {
		return msg, 0, nil
	}
	return msg, msg[0], nil
}
