package stages

import (
	"net"
	"testing"
	"time"
)

// TestWireKeptWriteToADeadSocketEnds: the kept bytes of a hold are written
// after nats.go's own write returned, when its write deadline is cleared.
// To a socket that takes nothing (a partition: the peer reads nothing,
// the buffers are full; here a pipe nobody reads) that write must fail
// within wireWriteTimeout and break the connection — not block with the
// Wire's lock held, which would stop every later write and nats.go's
// Close of the socket, so that the connection never reconnects and the
// processor never drains (TestPartitionProcessorCutOff failed so:
// "graceful stop: exit -1").
func TestWireKeptWriteToADeadSocketEnds(t *testing.T) {
	defer func(d time.Duration) { wireWriteTimeout = d }(wireWriteTimeout)
	wireWriteTimeout = 200 * time.Millisecond

	sock, peer := net.Pipe() // a write blocks until the peer reads: never
	defer peer.Close()
	w := &Wire{MaxDelay: time.Hour} // only the release writes
	conn := &wireConn{Conn: sock, w: w}
	w.cur = conn

	w.Hold()
	if _, err := conn.Write([]byte("PUB x 1\r\nx\r\n")); err != nil {
		t.Fatalf("a held write: %v", err)
	}
	released := make(chan struct{})
	go func() { w.Release(); close(released) }()
	select {
	case <-released:
	case <-time.After(10 * time.Second):
		t.Fatal("the release's write of the kept bytes still blocks on a socket that takes nothing")
	}
	if _, err := conn.Write([]byte("PING\r\n")); err == nil {
		t.Error("a write after the kept bytes failed succeeded: nats.go would never learn the socket is gone")
	}
	closed := make(chan struct{})
	go func() { _ = conn.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close blocks")
	}
}
