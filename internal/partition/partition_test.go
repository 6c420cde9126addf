//go:build linux

package partition_test

import (
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/portcullis/portcullis/internal/partition"
)

func TestMain(m *testing.M) {
	partition.RunChild()
	goleak.VerifyTestMain(m)
}

// echo serves, inside nd, a listener that echoes what it reads, and
// returns its address.
func echo(t *testing.T, nd *partition.Node) string {
	t.Helper()
	ln, err := nd.Listen("tcp", nd.IP+":7000")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

// reaches reports whether from can open a connection to addr and get a
// byte echoed back within a second.
func reaches(from *partition.Node, addr string) bool {
	c, err := from.Dial("tcp", addr)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte{1}); err != nil {
		return false
	}
	_, err = c.Read(make([]byte, 1))
	return err == nil
}

// Cut silences a node, Heal brings it back; Split keeps each group to
// itself, Join undoes it; an established connection survives a cut that
// heals (as TCP does over a real partition).
func TestCutHealSplitJoin(t *testing.T) {
	n := partition.New(t)
	a, b, c := n.Add(t, "a"), n.Add(t, "b"), n.Add(t, "c")
	toB, toC := echo(t, b), echo(t, c)
	if !reaches(a, toB) || !reaches(a, toC) {
		t.Fatal("a does not reach b and c on the bridge")
	}
	held, err := a.Dial("tcp", toB)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()

	n.Cut(t, b)
	if reaches(a, toB) {
		t.Error("a reaches b while b is cut off")
	}
	if !reaches(a, toC) {
		t.Error("cutting b cut a from c")
	}
	_ = held.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := held.Write([]byte{2}); err != nil {
		t.Fatal(err) // queued: nothing tells the sender
	}
	if _, err := held.Read(make([]byte, 1)); err == nil {
		t.Error("a byte came back over a cut link")
	}
	n.Heal(t, b)
	if !reaches(a, toB) {
		t.Error("a does not reach b after the heal")
	}
	_ = held.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := held.Read(make([]byte, 1)); err != nil {
		t.Errorf("the connection held through the cut: %v", err)
	}

	n.Split(t, []*partition.Node{a, c}, []*partition.Node{b})
	if reaches(a, toB) || !reaches(a, toC) {
		t.Error("split {a c} {b}: a must reach c and not b")
	}
	n.Join(t)
	if !reaches(a, toB) {
		t.Error("a does not reach b after the join")
	}
}

// The Net's namespaces go when its test ends; a namespace left by a dead
// run is removed by the next New; nothing is added to the host's network.
func TestCleanupAndStale(t *testing.T) {
	partition.Require(t)
	hostLinks := links(t)
	// A run that died: its pid is gone (a child that exited).
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	stale := "pcx-" + strconv.Itoa(dead.Process.Pid) + "-1-x"
	if out, err := exec.Command("ip", "netns", "add", stale).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	var made []string
	t.Run("net", func(t *testing.T) {
		n := partition.New(t)
		n.Add(t, "a")
		n.Add(t, "b")
		made = partition.Namespaces(t)
	})
	now := partition.Namespaces(t)
	if slices.Contains(now, stale) {
		t.Errorf("the dead run's namespace %s is still there", stale)
		_ = exec.Command("ip", "netns", "del", stale).Run()
	}
	for _, ns := range made {
		if strings.HasPrefix(ns, "pcx-"+strconv.Itoa(os.Getpid())+"-") && slices.Contains(now, ns) {
			t.Errorf("namespace %s outlived its test", ns)
		}
	}
	if got := links(t); !slices.Equal(got, hostLinks) {
		t.Errorf("the host's links changed: %v, then %v", hostLinks, got)
	}
}

// links lists the host namespace's interfaces.
func links(t *testing.T) []string {
	t.Helper()
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, i := range ifs {
		names = append(names, i.Name)
	}
	slices.Sort(names)
	return names
}

// A proxy in a node adds its latency both ways, and its reset drops the
// connections through it.
func TestProxyLatencyAndReset(t *testing.T) {
	n := partition.New(t)
	a, b := n.Add(t, "a"), n.Add(t, "b")
	p := partition.StartProxy(t, a, []string{echo(t, b)})
	through := strings.TrimPrefix(p.URL, "nats://")
	roundTrip := func() time.Duration {
		t.Helper()
		start := time.Now()
		if !reaches(a, through) {
			t.Fatal("no echo through the proxy")
		}
		return time.Since(start)
	}
	if d := roundTrip(); d > 150*time.Millisecond {
		t.Fatalf("a round trip through the bare proxy took %s", d)
	}
	p.Add(t, partition.Toxic{Name: "latency", Type: "latency", Attributes: map[string]any{"latency": 150}})
	if d := roundTrip(); d < 300*time.Millisecond {
		t.Errorf("a round trip with 150ms each way took %s", d)
	}
	p.Remove(t, "latency")

	c, err := a.Dial("tcp", through)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p.Add(t, partition.Toxic{Name: "reset", Type: "reset_peer", Attributes: map[string]any{"timeout": 0}})
	_, _ = c.Write([]byte{1})
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Error("a byte came back through a reset")
	}
	p.Remove(t, "reset")
}

// A Disk fills until ENOSPC and takes writes again once it grows.
func TestDiskFillsAndGrows(t *testing.T) {
	d := partition.NewDisk(t, 1<<20)
	wrote := d.Fill(t, "filler", 0)
	if wrote < 512<<10 || wrote > 1<<20 {
		t.Errorf("the filler took %d bytes of a 1 MiB disk", wrote)
	}
	err := os.WriteFile(filepath.Join(d.Dir, "more"), make([]byte, 64<<10), 0o644)
	if !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("a write to the full disk: %v, want ENOSPC", err)
	}
	d.Resize(t, 2<<20)
	if err := os.WriteFile(filepath.Join(d.Dir, "more"), make([]byte, 64<<10), 0o644); err != nil {
		t.Fatalf("a write after the disk grew: %v", err)
	}
}

// A Disk is unmounted when its test ends; one left mounted by a run that
// died is unmounted by the next NewDisk.
func TestDiskUnmountedAndStale(t *testing.T) {
	partition.RequireMount(t)
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(t.TempDir(), "disk")
	if err := os.Mkdir(stale, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("pcx-"+strconv.Itoa(dead.Process.Pid), stale, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	var dir string
	t.Run("disk", func(t *testing.T) {
		dir = partition.NewDisk(t, 1<<20).Dir
		if _, ok := partition.Mounts(t)[dir]; !ok {
			t.Errorf("%s is not listed as mounted", dir)
		}
	})
	mounts := partition.Mounts(t)
	if _, ok := mounts[stale]; ok {
		t.Errorf("the dead run's disk %s is still mounted", stale)
		_ = unix.Unmount(stale, unix.MNT_DETACH)
	}
	if _, ok := mounts[dir]; ok {
		t.Errorf("disk %s outlived its test", dir)
	}
}
