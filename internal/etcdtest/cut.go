package etcdtest

import (
	"io"
	"net"
	"sync"
	"testing"
)

// StartCuttable is Start behind a loopback TCP proxy. cut drops every
// connection through it at once: the nodes of a test cut off from etcd
// now, not after etcd's graceful stop (which serves open streams for
// seconds more). The connections they open while cut get no answer (as
// across a partition) until heal, when they go through to etcd, so a
// node is back at once, not after its client's reconnect backoff. Either
// may be called any number of times.
func StartCuttable(t testing.TB) (endpoint string, cut, heal func()) {
	t.Helper()
	target, _ := StartStoppable(t)
	return Cuttable(t, target)
}

// Cuttable puts the cut proxy of StartCuttable in front of a running
// etcd's client endpoint target (a Shared one): cut drops the test's
// connections through its proxy, not the etcd, so other tests of the
// same etcd go on. The proxy closes when the test ends.
func Cuttable(t testing.TB, target string) (endpoint string, cut, heal func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target, healed: make(chan struct{}), closed: make(chan struct{}), conns: map[net.Conn]bool{}}
	close(p.healed)
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() { // before etcd stops (cleanups run last first)
		close(p.closed)
		ln.Close()
		p.setCut(true)
		p.wg.Wait()
	})
	return ln.Addr().String(), func() { p.setCut(true) }, func() { p.setCut(false) }
}

type proxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup
	closed chan struct{} // the test ended

	mu     sync.Mutex
	healed chan struct{} // closed while not cut
	conns  map[net.Conn]bool
}

func (p *proxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.healed:
		if cut {
			p.healed = make(chan struct{})
		}
	default:
		if !cut {
			close(p.healed)
		}
	}
	if cut {
		for c := range p.conns {
			c.Close()
		}
	}
}

// track adds c to the connections cut closes, and returns the channel
// closed once not cut.
func (p *proxy) track(c net.Conn) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.conns[c] = true
	return p.healed
}

func (p *proxy) untrack(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
	c.Close()
}

func (p *proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.pipe(c)
	}
}

// pipe holds c while cut, then copies between it and a new connection to
// etcd until either ends (or cut closes them).
func (p *proxy) pipe(c net.Conn) {
	defer p.wg.Done()
	defer p.untrack(c)
	select {
	case <-p.track(c):
	case <-p.closed:
		return
	}
	u, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	p.track(u)
	defer p.untrack(u)
	done := make(chan struct{})
	go func() {
		io.Copy(u, c)
		u.Close()
		close(done)
	}()
	io.Copy(c, u)
	c.Close()
	<-done
}
