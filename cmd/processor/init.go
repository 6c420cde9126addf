package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nkeys"

	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/fixtures"
	"github.com/portcullis/portcullis/schema/keyfile"
)

// Files `processor init` writes, in its --dir.
const (
	initConfig   = "portcullis.hcl"
	initHostKey  = "host.nk"
	initOperator = "operator.nk"
	initProposal = "proposal.json"
)

const initAbout = `Writes a small configuration with NATS authentication on, ready for ` + "`run --config`" + `: ` + initConfig + ` (one host,
one operator, a fake provider "demo" that confirms every dispatch), the host's and the operator's fresh nkey
seeds (` + initHostKey + ` and ` + initOperator + `, mode 0600), and ` + initProposal + `, a proposal that host may send; then prints
the next three commands. Paths in the configuration (data/…) are relative to the directory the processor runs
in: run it in --dir. It never overwrites a file. config.example.hcl shows every key.`

// initTemplate is the configuration init writes: hosts, operator and
// provider blocks, with the keys filled in (%[1]s listen, %[2]s metrics,
// %[3]s the host's public key, %[4]s the operator's).
const initTemplate = `# Portcullis, written by ` + "`processor init`" + `: one host, one operator, a fake
# provider; NATS authentication on. Every key and its default: config.example.hcl.
nats {
  listen    = %[1]q # the embedded NATS server: every client logs in with its nkey
  store_dir = "data/nats"
}
store {
  dir = "data/store"
}
metrics {
  listen = %[2]q # /metrics, /healthz, /readyz
}
tenant "tenant:demo" {
  security_domains = ["security-domain:demo"]
}
host "frontdesk" {
  public_key = %[3]q # seed: host.nk
  tenants    = ["tenant:demo"]
}
operator "ops" {
  public_key = %[4]q # seed: operator.nk
}
provider "demo" {
  adapter = "fake" # confirms every dispatch; a real provider: adapter "nats" and a connector block
}
`

// initProposalJSON is a proposal host "frontdesk" may send to provider
// "demo": SPEC §2.1's lumber proposal (one authoritative candidate, no
// grant, so it asks for approval) in the demo tenant the written config
// names, from the CLI.
func initProposalJSON() (string, error) {
	p := fixtures.Lumber("prop-1")
	for path, v := range map[string]any{
		"context.authorization.scope_ref":       "policy-scope:demo",
		"context.authorization.policy_revision": "policy:1",
		"context.provider.account_ref":          "demo:fixture",
		"context.delivery.delivery_id":          "delivery:1",
		"context.delivery.source":               "cli",
		"context.host_invocation.invocation_id": "invocation:1",
		"requester.agent_id":                    "agent:cli",
		"requester.model_provider":              "none",
		"requester.model_id":                    "none",
	} {
		fixtures.Set(p, path, v)
	}
	b, err := json.MarshalIndent(p, "", "  ")
	return string(b) + "\n", err
}

func cmdInit(c *cmdline, args []string, _ io.Reader) int {
	dir := c.fs.String("dir", ".", "write the files into `DIR` (made if missing)")
	listen := c.fs.String("listen", config.DefaultListen, "the embedded NATS server's `ADDR` (nats.listen)")
	metricsListen := c.fs.String("metrics-listen", config.DefaultMetricsListen, "the metrics `ADDR` (metrics.listen; \"\" disables it)")
	if _, code, done := c.parse(args); done {
		return code
	}
	paths := map[string]string{}
	for _, f := range []string{initConfig, initHostKey, initOperator, initProposal} {
		paths[f] = filepath.Join(*dir, f)
		if _, err := os.Lstat(paths[f]); err == nil {
			return c.fail(fmt.Errorf("%s already exists; refusing to overwrite it (give --dir DIR for a new directory)", paths[f]))
		} else if !errors.Is(err, os.ErrNotExist) {
			return c.fail(err)
		}
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		return c.fail(err)
	}
	pubs := map[string]string{}
	for _, f := range []string{initHostKey, initOperator} {
		kp, err := nkeys.CreateUser()
		if err != nil {
			return c.fail(err)
		}
		pubs[f], _ = kp.PublicKey()
		err = keyfile.WriteSeed(paths[f], kp)
		kp.Wipe()
		if err != nil {
			return keygenFailed(c, paths[f], err)
		}
	}
	src := fmt.Sprintf(initTemplate, *listen, *metricsListen, pubs[initHostKey], pubs[initOperator])
	// Refuse to write what run would refuse (a bad --listen, say).
	if _, err := config.Parse([]byte(src), paths[initConfig]); err != nil {
		return c.fail(err)
	}
	proposal, err := initProposalJSON()
	if err != nil {
		return c.fail(err)
	}
	for f, content := range map[string]string{initConfig: src, initProposal: proposal} {
		if err := writeNew(paths[f], content); err != nil {
			return c.fail(err)
		}
	}
	p := invokedAs()
	if filepath.Clean(*dir) != "." && strings.Contains(p, "/") && !filepath.IsAbs(p) && !strings.Contains(p, " ") {
		if abs, err := filepath.Abs(p); err == nil {
			p = abs // the commands run in --dir
		}
	}
	fmt.Fprintf(c.stdout, "Wrote %s (host \"frontdesk\", operator \"ops\", fake provider \"demo\"; NATS authentication on),\n"+
		"the seeds %s and %s (mode 0600, secret) and %s. Next:\n\n", paths[initConfig], paths[initHostKey], paths[initOperator], paths[initProposal])
	if filepath.Clean(*dir) != "." {
		fmt.Fprintf(c.stdout, "  cd %s\n", *dir)
	}
	fmt.Fprintf(c.stdout, "  %s run --config %s\n", p, initConfig)
	fmt.Fprintf(c.stdout, "  %s propose --config %s --nkey %s --approve %s      # in another terminal: a host proposes\n", p, initConfig, initHostKey, initProposal)
	fmt.Fprintf(c.stdout, "  %s activity list --config %s --nkey %s                       # the operator's view\n", p, initConfig, initOperator)
	return 0
}

// invokedAs is how to call this command again in the printed advice: as
// it was called (./processor), "go run ./cmd/processor" under go run, or
// "processor".
func invokedAs() string {
	arg0 := os.Args[0]
	switch {
	case strings.Contains(arg0, "go-build"):
		return "go run ./cmd/processor"
	case strings.HasSuffix(arg0, ".test") || strings.Contains(arg0, "portcullis-test-bin"):
		return "processor"
	}
	return arg0
}

// writeNew writes a new file (mode 0644), never over an existing one.
func writeNew(path, content string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(content); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
