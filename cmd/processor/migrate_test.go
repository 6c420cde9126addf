package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
)

// processor migrate moves a stopped single node's store into the buckets
// of the NATS its configuration names, prints counts only, is safe to run
// again, and refuses a store whose processor runs.
func TestMigrateCommand(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"migrate"}, nil, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "--config is required") {
		t.Fatalf("without --config: %d %s", code, stderr.String())
	}

	env := testenv.New(t)
	p := testenv.Lumber("mig-1")
	testenv.Set(p, "intent.payload.note", "payload-only-5b1d")
	env.PublishSigned(t, testenv.Granted(t, p, "sku-1001", time.Now()), env.Host)
	env.Recorder.Wait(t, "mig-1", testenv.Kind(schema.KindConfirmed))
	env.Quiesce(t)
	cfg := *env.Config
	cfg.Store.Journal = config.JournalReplicated
	path := testenv.WriteConfig(t, &cfg)

	stdout.Reset()
	stderr.Reset()
	if code := run([]string{"migrate", "--config", path}, nil, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "in use") {
		t.Fatalf("while the processor runs: %d\n%s%s", code, stdout.String(), stderr.String())
	}
	env.Stop(t)
	for i, want := range []string{"intents                       1        0        0         0", "intents                       0        1        0         0"} {
		stdout.Reset()
		stderr.Reset()
		if code := run([]string{"migrate", "--config", path}, nil, &stdout, &stderr); code != 0 {
			t.Fatalf("run %d: %d\n%s%s", i+1, code, stdout.String(), stderr.String())
		}
		out := stdout.String()
		if !strings.Contains(out, want) || !strings.Contains(out, "marked migrated") {
			t.Errorf("run %d printed:\n%s", i+1, out)
		}
		if strings.Contains(out+stderr.String(), "payload-only-5b1d") || strings.Contains(out, "sha256:") {
			t.Errorf("run %d printed a value or an identifier:\n%s", i+1, out)
		}
	}
}
