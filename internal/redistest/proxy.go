package redistest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Proxy is a loopback TCP proxy in front of one Redis server that can lose a reply on purpose
// and can stop forwarding without closing (Blackhole, Heal):
// armed with CutReply, it forwards a matching command, lets the server run it, throws the reply
// away and closes that client connection. The client sees its connection drop with the command
// sent and no answer, exactly as when a network fails at the wrong moment; go-redis then retries
// on another connection without telling its caller. Test-only: it parses RESP in both
// directions and is not built for speed.
type Proxy struct {
	Addr string // "127.0.0.1:PORT": point the client here

	target string
	ln     net.Listener

	mu     sync.Mutex
	cut    *cutRequest // armed, or nil
	conns  map[*proxyConn]struct{}
	closed bool
	wg     sync.WaitGroup
	// open is closed while bytes flow; during a blackhole it is a fresh channel that Heal
	// closes. done is closed by Close, so nothing waits on open for ever.
	open chan struct{}
	done chan struct{}
}

type cutRequest struct {
	match func(cmd []string) bool
	done  chan struct{}
}

// StartProxy listens on a free loopback port and forwards every connection to target. It is
// closed, with every connection it carries, when the test ends.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: proxy listen: %v", err)
	}
	p := &Proxy{Addr: ln.Addr().String(), target: target, ln: ln, conns: map[*proxyConn]struct{}{},
		open: make(chan struct{}), done: make(chan struct{})}
	close(p.open)
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// URL is the redis:// URL of the proxy.
func (p *Proxy) URL() string { return "redis://" + p.Addr + "/0" }

// Command matches a command by name, case-insensitively, and, when args are given, by its last
// arguments: Command("XREADGROUP", ">") matches a read of new entries only.
func Command(name string, lastArgs ...string) func(cmd []string) bool {
	return func(cmd []string) bool {
		if len(cmd) == 0 || !strings.EqualFold(cmd[0], name) || len(cmd) < 1+len(lastArgs) {
			return false
		}
		tail := cmd[len(cmd)-len(lastArgs):]
		for i, a := range lastArgs {
			if tail[i] != a {
				return false
			}
		}
		return true
	}
}

// CutReply arms the proxy: the next reply that answers a command match accepts, and is not a
// null (a blocking read that timed out), is dropped and its client connection closed. The
// returned channel is closed once that happened. Arming again replaces an armed request.
func (p *Proxy) CutReply(match func(cmd []string) bool) <-chan struct{} {
	r := &cutRequest{match: match, done: make(chan struct{})}
	p.mu.Lock()
	p.cut = r
	p.mu.Unlock()
	return r.done
}

// take returns the armed request if cmd matches it, disarming it.
func (p *Proxy) take(cmd []string) *cutRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut == nil || !p.cut.match(cmd) {
		return nil
	}
	r := p.cut
	p.cut = nil
	return r
}

// Blackhole makes the proxy stop forwarding without closing anything, as a network partition
// or a frozen middlebox does: connections stay open and silent, and new connections are
// accepted but not connected through. The connections open at the blackhole stay silent for
// good, as flows a middlebox lost the state of do: only a client that notices (read timeouts)
// and connects again gets through once Heal is called.
func (p *Proxy) Blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
		p.open = make(chan struct{})
	default: // already blackholed
	}
	for c := range p.conns {
		c.mu.Lock()
		c.frozen = true
		c.mu.Unlock()
	}
}

// Heal ends a blackhole for new connections.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
	default:
		close(p.open)
	}
}

// pass waits while the proxy is blackholed; it reports false once the proxy is closed.
func (p *Proxy) pass() bool {
	p.mu.Lock()
	open := p.open
	p.mu.Unlock()
	select {
	case <-open:
		return true
	case <-p.done:
		return false
	}
}

// Close stops listening and closes every connection. Safe to call more than once.
func (p *Proxy) Close() {
	p.ln.Close()
	p.mu.Lock()
	if !p.closed {
		close(p.done)
	}
	p.closed = true
	for c := range p.conns {
		c.close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.connect(client)
	}
}

// connect connects one accepted client through to the target, once no blackhole stops it.
func (p *Proxy) connect(client net.Conn) {
	defer p.wg.Done()
	if !p.pass() {
		client.Close()
		return
	}
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		client.Close()
		return
	}
	c := &proxyConn{p: p, client: client, server: server, closed: make(chan struct{})}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		c.close()
		return
	}
	p.conns[c] = struct{}{}
	p.mu.Unlock()
	p.wg.Add(2)
	go c.requests()
	go c.replies()
}

// proxyConn is one client connection and its server connection.
type proxyConn struct {
	p              *Proxy
	client, server net.Conn

	mu      sync.Mutex
	pending [][]string // commands sent, oldest first, whose replies have not come back
	frozen  bool       // silent for good (Blackhole)
	once    sync.Once
	closed  chan struct{}
}

func (c *proxyConn) close() {
	c.once.Do(func() {
		c.client.Close()
		c.server.Close()
		close(c.closed)
	})
}

// pass waits while the proxy is blackholed, and for good once c is frozen; it reports false
// once c or the proxy is closed.
func (c *proxyConn) pass() bool {
	c.mu.Lock()
	frozen := c.frozen
	c.mu.Unlock()
	if frozen {
		select {
		case <-c.closed:
		case <-c.p.done:
		}
		return false
	}
	return c.p.pass()
}

func (c *proxyConn) drop() {
	c.close()
	c.p.mu.Lock()
	delete(c.p.conns, c)
	c.p.mu.Unlock()
}

// requests copies commands from the client to the server, noting each one's arguments.
func (c *proxyConn) requests() {
	defer c.p.wg.Done()
	defer c.drop()
	r := bufio.NewReader(c.client)
	var raw bytes.Buffer
	for {
		raw.Reset()
		cmd, err := readCommand(r, &raw)
		if err != nil {
			return
		}
		c.mu.Lock()
		c.pending = append(c.pending, cmd)
		c.mu.Unlock()
		if !c.pass() {
			return
		}
		if _, err := c.server.Write(raw.Bytes()); err != nil {
			return
		}
	}
}

// replies copies replies from the server to the client, unless one is to be cut.
func (c *proxyConn) replies() {
	defer c.p.wg.Done()
	defer c.drop()
	r := bufio.NewReader(c.server)
	var raw bytes.Buffer
	for {
		raw.Reset()
		kind, err := readReply(r, &raw)
		for err == nil && kind == '|' { // an attribute comes before the reply it belongs to
			kind, err = readReply(r, &raw)
		}
		if err != nil {
			return
		}
		if kind != '>' { // a push is not the reply to a command
			c.mu.Lock()
			var cmd []string
			if len(c.pending) > 0 {
				cmd, c.pending = c.pending[0], c.pending[1:]
			}
			c.mu.Unlock()
			if !isNull(raw.Bytes()) {
				if req := c.p.take(cmd); req != nil {
					c.close()
					close(req.done)
					return
				}
			}
		}
		if !c.pass() {
			return
		}
		if _, err := c.client.Write(raw.Bytes()); err != nil {
			return
		}
	}
}

func isNull(reply []byte) bool {
	return bytes.HasPrefix(reply, []byte("_")) || bytes.HasPrefix(reply, []byte("$-1\r")) ||
		bytes.HasPrefix(reply, []byte("*-1\r"))
}

var errProto = errors.New("redistest: proxy: protocol error")

// readLine reads one CRLF-terminated line into raw and returns it without the CRLF.
func readLine(r *bufio.Reader, raw *bytes.Buffer) ([]byte, error) {
	line, err := r.ReadBytes('\n')
	if err != nil {
		return nil, err
	}
	raw.Write(line)
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return nil, errProto
	}
	return line[:len(line)-2], nil
}

// readCommand reads one command (a RESP array of bulk strings, as clients send) into raw.
func readCommand(r *bufio.Reader, raw *bytes.Buffer) ([]string, error) {
	line, err := readLine(r, raw)
	if err != nil {
		return nil, err
	}
	if line[0] != '*' {
		return strings.Fields(string(line)), nil // an inline command
	}
	n, err := strconv.Atoi(string(line[1:]))
	if err != nil {
		return nil, errProto
	}
	cmd := make([]string, 0, n)
	for range n {
		line, err := readLine(r, raw)
		if err != nil {
			return nil, err
		}
		if line[0] != '$' {
			return nil, errProto
		}
		size, err := strconv.Atoi(string(line[1:]))
		if err != nil || size < 0 {
			return nil, errProto
		}
		b := make([]byte, size+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, err
		}
		raw.Write(b)
		cmd = append(cmd, string(b[:size]))
	}
	return cmd, nil
}

// readReply reads one RESP2 or RESP3 value into raw and returns its type byte.
func readReply(r *bufio.Reader, raw *bytes.Buffer) (byte, error) {
	line, err := readLine(r, raw)
	if err != nil {
		return 0, err
	}
	kind := line[0]
	switch kind {
	case '+', '-', ':', ',', '#', '_', '(':
		return kind, nil
	case '$', '!', '=':
		n, err := strconv.Atoi(string(line[1:]))
		if err != nil {
			return 0, errProto
		}
		if n < 0 {
			return kind, nil
		}
		if _, err := io.CopyN(raw, r, int64(n)+2); err != nil {
			return 0, err
		}
		return kind, nil
	case '*', '~', '>', '%', '|':
		n, err := strconv.Atoi(string(line[1:]))
		if err != nil {
			return 0, errProto
		}
		if kind == '%' || kind == '|' {
			n *= 2
		}
		for range max(n, 0) {
			k, err := readReply(r, raw)
			for err == nil && k == '|' {
				k, err = readReply(r, raw)
			}
			if err != nil {
				return 0, err
			}
		}
		return kind, nil
	}
	return 0, fmt.Errorf("%w: reply type %q", errProto, kind)
}
