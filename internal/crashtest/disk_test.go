//go:build linux

package crashtest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/engine"
	"github.com/portcullis/portcullis/internal/natscluster"
	"github.com/portcullis/portcullis/internal/partition"
	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
)

// metricsAddr is the metrics listener p logged at its start.
func metricsAddr(t *testing.T, p *testenv.Process) string {
	t.Helper()
	for _, l := range strings.Split(string(p.Logs.Bytes()), "\n") {
		var line struct {
			Msg     string `json:"msg"`
			Metrics string `json:"metrics"`
		}
		if json.Unmarshal([]byte(l), &line) == nil && line.Msg == "processor started" {
			return line.Metrics
		}
	}
	t.Fatal("the processor did not log its metrics address")
	return ""
}

// readyz asks a processor's /readyz: its status and body ("" and the
// error when it does not answer).
func readyz(addr string) (int, string) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + addr + "/readyz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// waitReadyz waits until the processor's /readyz answers code with a body
// containing want, and returns the body.
func waitReadyz(t *testing.T, p *testenv.Process, code int, want string, within time.Duration) string {
	t.Helper()
	addr := metricsAddr(t, p)
	var got int
	var body string
	if !testenv.Poll(within, func() bool {
		got, body = readyz(addr)
		return got == code && strings.Contains(body, want)
	}) {
		t.Fatalf("readyz %d %q, want %d %q within %s\n%s", got, body, code, want, within, tail(p.Logs.Bytes(), 40))
	}
	return body
}

// tail is the last n lines of logs.
func tail(logs []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(logs), "\n"), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}

// A full disk (SPEC §6 "an unknown is never a failure"; issue 33): one
// processor with its embedded NATS server, its store.dir and
// nats.store_dir on a tmpfs of their own, proposals flowing (grants and
// provider timeouts mixed in, as in the soaks).
//
//  1. The disk fills to below the reserve (engine.DiskReserve): /readyz
//     says "disk: store.dir nearly full", the stages take no new input
//     while host publishes are still stored; with room again (the filler
//     removed) they carry on.
//  2. The disk fills completely (ENOSPC) while proposals are in flight:
//     the embedded server's streams cannot write (nats-server keeps that
//     error until a stream is loaded again), /readyz names it, nothing is
//     refused or ended; with room again (the tmpfs grown) the processor
//     restarts its embedded server and carries on, by itself.
//  3. Killed while the disk is full, the processor refuses to start,
//     saying the disk has no room (before, Pebble's open hung, logging a
//     failed flush every millisecond); with room again it starts.
//
// Every proposal ends CONFIRMED, no key reaches the provider twice, no
// outage turned into a failure (the history's checks).
func TestFullDisk(t *testing.T) {
	t.Parallel()
	const size = 96 << 20
	disk := partition.NewDisk(t, size)
	var n *node
	env := testenv.New(t, testenv.NotStarted(), fastReconcile, testenv.OnServers(func(t testing.TB, cfg *config.Config, _ string) (string, nats.CustomDialer) {
		ports, err := natscluster.FreePorts(1)
		if err != nil {
			t.Fatal(err)
		}
		c := *cfg
		listen := fmt.Sprintf("127.0.0.1:%d", ports[0])
		// Loopback without NATS authentication: the test's clients share
		// the server's account (the embedded server makes the
		// processor's identity anew at every start).
		c.NATS = config.NATS{Embedded: true, Listen: listen, StoreDir: filepath.Join(disk.Dir, "nats"), Replicas: 1}
		c.Store.Dir = filepath.Join(disk.Dir, "store")
		n = &node{cfg: &c}
		n.start(t.(*testing.T))
		return "nats://" + listen, nil
	}))
	far := serveFarSide(t, env)
	far.OnDispatch(soakDispatch)
	l := &netLoad{far: far, keys: map[string]string{}}
	ended := func(ids []string) {
		t.Helper()
		for _, id := range ids {
			env.WaitStored(t, id, testenv.IsTerminal, 2*time.Minute)
		}
	}
	l.publish(t, 12)
	ended(slices.DeleteFunc(slices.Clone(l.ids), func(id string) bool { return slices.Contains(l.parked, id) }))
	l.grant(t, 0)
	waitReadyz(t, n.p, 200, "ok", time.Minute)

	// 1. Below the reserve: no new input taken; nothing fails.
	keep := int64(engine.DiskReserve / 2)
	disk.Fill(t, "filler", keep)
	body := waitReadyz(t, n.p, 503, "disk: store.dir nearly full", 10*time.Second)
	t.Logf("%d MiB free: readyz %q", disk.Free(t)>>20, body)
	before := len(l.ids)
	l.publish(t, 6) // stored in the ingress stream: the disk still has room for it
	time.Sleep(2 * time.Second)
	for _, id := range l.ids[before:] {
		if o, found := env.StoredOutcome(t, id); found {
			t.Errorf("%s answered %s while the disk was below the reserve", id, o.Kind)
		}
	}
	if err := os.Remove(filepath.Join(disk.Dir, "filler")); err != nil {
		t.Fatal(err)
	}
	waitReadyz(t, n.p, 200, "ok", 30*time.Second)
	l.grant(t, 0)

	// 2. Full (ENOSPC) with proposals in flight, and a host publishing:
	// its publishes go unanswered (unknowns: sent again later under the
	// same message ids).
	l.publish(t, 12)
	disk.Fill(t, "filler", 0)
	var unanswered []string
	bodies := map[string]map[string]any{}
	for range 4 {
		id, p, key, needsGrant := soakProposal(t, len(l.ids))
		bodies[id] = p
		far.rec.Propose(testenv.Ref(id), far.rec.Now())
		if err := env.TryPublishDurably(t, p, env.Host, false, "proposal/"+id, 2*time.Second); err != nil {
			unanswered = append(unanswered, id)
		}
		l.ids, l.keys[id] = append(l.ids, id), key
		if needsGrant {
			l.parked = append(l.parked, id)
		}
	}
	body = waitReadyz(t, n.p, 503, "nats: store full", 30*time.Second)
	t.Logf("full: readyz %q; %d of 4 host publishes unanswered", body, len(unanswered))
	if n.p.ExitCode() != -1 {
		t.Fatalf("the processor exited on a full disk (%d):\n%s", n.p.ExitCode(), tail(n.p.Logs.Bytes(), 40))
	}
	disk.Resize(t, size+engine.DiskReserve+8<<20)
	waitReadyz(t, n.p, 200, "ok", time.Minute)
	for id, p := range bodies { // the same message: stored once
		env.PublishDurably(t, p, env.Host, false, "proposal/"+id)
	}
	l.grant(t, 0)
	ended(l.ids)

	// 3. Killed on a full disk, started again.
	if err := os.Remove(filepath.Join(disk.Dir, "filler")); err != nil {
		t.Fatal(err)
	}
	l.publish(t, 6)
	disk.Fill(t, "filler", 0)
	n.p.Kill()
	if !n.p.Wait(10 * time.Second) {
		t.Fatal("the processor survived SIGKILL")
	}
	refused := testenv.StartProcess(t, n.cfg)
	if !refused.Wait(30 * time.Second) {
		t.Fatalf("the processor neither started nor gave up on a full disk in 30s:\n%s", tail(refused.Logs.Bytes(), 20))
	}
	if out := string(refused.Logs.Bytes()); refused.ExitCode() == 0 || !strings.Contains(out, "free some space") {
		t.Errorf("on a full disk the processor exited %d saying:\n%s", refused.ExitCode(), tail(refused.Logs.Bytes(), 20))
	}
	if err := os.Remove(filepath.Join(disk.Dir, "filler")); err != nil {
		t.Fatal(err)
	}
	n.start(t)
	waitReadyz(t, n.p, 200, "ok", time.Minute)
	l.grant(t, 0)
	ended(l.ids)
	env.QuiesceWithin(t, time.Minute)

	kinds := map[schema.Kind]int{}
	for _, id := range l.ids {
		o, _ := env.StoredOutcome(t, id)
		kinds[o.Kind]++
	}
	t.Logf("%d proposals ended %v; the provider received %d keys", len(l.ids), kinds, len(far.Delivered()))
	far.checkTruth(t)
	n.stop(t)
}
