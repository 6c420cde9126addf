// Command processor runs Portcullis and its operator tools.
//
//	processor init [--dir DIR]          a small auth-on configuration with fresh keys, and the next commands
//	processor run --dev                 embedded NATS, unsigned input, providers "demo" (fake) and "inventory" (nats)
//	processor run --config FILE.hcl     as configured
//	processor validate FILE             check a configuration (every problem, sorted)
//	processor fingerprint [FILE|-]      a proposal's referent, fingerprint (v2) and idempotency key
//	processor check [FILE|-]            which field of a proposal breaks which rule (offline); else its fingerprint
//	processor propose --config F --nkey F [--approve] [FILE]   a host: publish a signed proposal, follow its outcomes
//	processor demo                      the seed scenarios end to end, as a timeline
//	processor receipts get FP|H/ID      an intent's receipts (asks the running processor over NATS)
//	processor activity get FP|H/ID      an intent's activity snapshot (reads the KV bucket)
//	processor activity list             intents, the most recently changed first (asks the processor)
//	processor approvals list            proposals parked for approval
//	processor proposals get H ID        a proposal's outcome history, fingerprint and latest receipt
//	processor reconcile list            actions whose effect is unknown
//	processor reconcile resolve FP|H/ID --present|--absent --evidence REF
//	processor console --nkey FILE       the operator's web console (--dev: unsigned, beside run --dev)
//	processor mcp --dev | --config FILE --nkey FILE   an MCP server for agents, as a host (stdio, or --http ADDR)
//	processor keygen KIND --out FILE    a new nkey for a role (or internal: the HMAC key file)
//	processor nats-permissions --config FILE   the accounts block for external servers
//	processor version                   the build's module version and VCS revision (also --version)
//	processor help [COMMAND]            a command's usage (so does COMMAND -h)
//
// See docs/running.md for every subcommand.
//
// It owns flags, exit codes and what a person reads; the work is the
// internal packages'. It is the top of the layering (internal/rules):
// nothing imports it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/portcullis/portcullis/internal/admin"
	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/engine"
	"github.com/portcullis/portcullis/metrics/version"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func commands() []command {
	ref := "<fingerprint|host/proposal_id>"
	return []command{
		{name: "init", synopsis: "[--dir DIR] [--listen ADDR] [--metrics-listen ADDR]", summary: "write a small auth-on configuration, fresh host and operator keys and a proposal: a start for run --config", run: cmdInit,
			about: initAbout},
		{name: "run", synopsis: "(--dev [--listen ADDR] [--metrics-listen ADDR] [--data DIR] | --config FILE) [--log-level LEVEL]", summary: "run the processor (--dev, or --config FILE)", run: cmdRun,
			about: "Runs Portcullis until SIGTERM or SIGINT, then drains. --dev needs no configuration: an embedded NATS server\nwithout authentication on 127.0.0.1:4222, data under ./data, unsigned input admitted; providers:\n" + config.DevProviders + ".\nThe log is JSON on standard error; --log-level sets the least severe level logged (the development-mode\nwarnings are logged whatever it says)."},
		{name: "validate", synopsis: "FILE | --config FILE", summary: "check a configuration file: every problem, with file:line", run: cmdValidate, maxArgs: 1,
			about: "Runs the check `run --config` runs before it starts (the same function; `check --config` and `migrate` too) and\nreports every problem found, sorted by position: keys and values; that every file it names (nats.credentials,\nnats.tls's files, internal.key_file when it exists) can be read and holds what it should; that the file sets\nanything at all; that no running processor holds its store.dir or nats.store_dir. Exit 0: valid; 1: invalid; 2: usage."},
		{name: "bench", synopsis: "[flags]", summary: "measure the pipeline end to end against a raw JetStream chain", run: cmdBench,
			about: "Runs a bare five-hop JetStream chain and then Portcullis end to end (granted proposals through every stage to a\nconnector over NATS) on a throwaway embedded server, and prints throughput, CPU per message, p50/p99 at -rate,\npeak RSS and their ratios. -cluster N runs both on an in-process three-server cluster (replicas 3, replicated\njournal) with N processors; -queued N instead drains N proposals published before the processor starts."},
		{name: "fingerprint", synopsis: "[--referent R] [--config FILE] [--canonical] [FILE|-]", summary: "a proposal's grounded referent, fingerprint v2 and idempotency key (offline)", run: cmdFingerprint, maxArgs: 1,
			about: fingerprintAbout()},
		{name: "check", synopsis: "[--referent R] [--config FILE [--host H] | --dev] [-o text|json] [FILE|-]", summary: "which field of a proposal breaks which rule, offline; its fingerprint when none does", run: cmdCheck, maxArgs: 1,
			about: checkAbout()},
		{name: "propose", synopsis: "--config FILE --nkey FILE [--approve|--decline] [--as ACTOR] [--id ID] [--url URL] [FILE|-]", summary: "act as a host: sign and publish a proposal, print its outcomes, grant its approval", run: cmdPropose, maxArgs: 1,
			about: proposeAbout},
		{name: "demo", synopsis: "[--keep] [--verbose] [--log-level LEVEL]", summary: "play the seed scenarios end to end on a throwaway embedded server", run: cmdDemo,
			about: "Plays the seed scenarios on a throwaway embedded server (authentication on, a random loopback port, a temporary\ndata directory) and prints a timeline. --keep keeps it running until Ctrl-C and leaves its indeterminate payment\nfor an operator: it prints the `processor console` (and `processor reconcile resolve`) command line to settle it."},
		{name: "receipts", summary: "receipt histories", subs: []command{
			{name: "get", synopsis: ref + " [flags]", summary: "an intent's receipt history (asks the running processor)", run: cmdReceiptsGet, maxArgs: 1,
				about: "Prints the receipt history of a fingerprint (sha256:<hex> or the bare hex), or of the fingerprint a\nproposal was grounded to (<host>/<proposal_id>), and the outcome its latest receipt gives.\n" + operatorAbout},
		}},
		{name: "activity", summary: "activity snapshots", subs: []command{
			{name: "get", synopsis: ref + " [flags]", summary: "an intent's value-free activity snapshot (reads the KV bucket)", run: cmdActivityGet, maxArgs: 1,
				about: "Prints an intent's activity snapshot as JSON, read from the activity bucket with a direct get (no consumer).\nA proposal (<host>/<proposal_id>) is first looked up by the running processor.\n" + operatorAbout},
			{name: "list", synopsis: "[--limit N] [--before REV] [flags]", summary: "intents, the most recently changed first, a page at a time (asks the running processor)", run: cmdActivityList,
				about: "Lists activity snapshots, the most recently changed first. Operators may not create consumers, so the running\nprocessor reads the bucket for them. A page ends with the --before of the next one.\n" + operatorAbout},
		}},
		{name: "approvals", summary: "proposals parked for approval", subs: []command{
			{name: "list", synopsis: "[--limit N] [flags]", summary: "proposals waiting for a grant, the soonest to expire first (asks the running processor)", run: cmdApprovalsList,
				about: "Lists the proposals parked until a grant for their fingerprint arrives or their approval expires: host,\nproposal id, fingerprint, referent, provider, when it arrived and when it expires. Summaries are not stored by\nthe processor (the NEEDS_APPROVAL outcome carries them).\n" + operatorAbout},
		}},
		{name: "proposals", summary: "single proposals", subs: []command{
			{name: "get", synopsis: "<host> <proposal_id> | <host>/<proposal_id> [flags]", summary: "a proposal's outcome history, fingerprint and latest receipt (asks the running processor)", run: cmdProposalsGet, maxArgs: 2,
				about: fmt.Sprintf("Prints every outcome of the proposal still in the outcome stream (at most %d: the first ones, then the\nlast), oldest first; the fingerprint it was grounded to; its authorization record; the latest receipt.\n", admin.MaxProposalOutcomes) + operatorAbout},
		}},
		{name: "reconcile", summary: "actions whose effect is unknown", subs: []command{
			{name: "list", synopsis: "[flags]", summary: "actions whose effect is unknown, oldest first (asks the running processor)", run: cmdReconcileList,
				about: "Lists the indeterminate actions with their ages, attempts and next poll.\n" + operatorAbout},
			{name: "resolve", synopsis: ref + " --present|--absent --evidence REF [flags]", summary: "settle an indeterminate action (asks the running processor)", run: cmdReconcileResolve, maxArgs: 1,
				about: "Records that the effect of an indeterminate action is present (CONFIRMED) or absent (REJECTED), with the\nevidence where the finding can be checked; every proposal of the intent gets the outcome.\n" + operatorAbout},
		}},
		{name: "console", synopsis: "(--nkey FILE | --dev) [--listen ADDR] [--tls-cert FILE --tls-key FILE --token-file FILE] [flags]", summary: "serve the operator's web console (overview, indeterminate queue, approvals, timelines, search)", run: cmdConsole,
			about: consoleAbout},
		{name: "mcp", synopsis: "(--dev | --config FILE --nkey FILE) [--url URL] [--http ADDR [--tls-cert FILE --tls-key FILE --token-file FILE] [--allow-origin ORIGINS]]", summary: "serve agents through MCP as a host: the mcp block's tools, clarifications and approvals asked of the user", run: cmdMCP,
			about: mcpAbout},
		{name: "keygen", synopsis: "host|connector|resolver|source|operator|processor --out FILE | --stdout\n       processor keygen internal --out FILE\n       processor keygen --public FILE", summary: "a new nkey for a role, or the internal HMAC key file; or an existing seed's public key", run: cmdKeygen, maxArgs: 1,
			about: "Makes a user nkey: the seed goes to --out FILE (mode 0600, never overwritten), the public key to standard\noutput for the role block's public_key. `keygen internal --out FILE` makes an internal HMAC key file.\n`keygen --public FILE` makes nothing: it prints the public key of the seed in FILE."},
		{name: "nats-permissions", synopsis: "--config FILE", summary: "print the nats-server accounts block for an external server", run: cmdNATSPermissions},
		{name: "migrate", synopsis: "--config FILE [--accept-conflicts]", summary: "move a single node's local state into a cluster's buckets (processor stopped)", run: cmdMigrate, about: migrateAbout},
		{name: "version", synopsis: "[-o text|json]", summary: "the module version and VCS revision and time of this build", run: cmdVersion},
		{name: "help", synopsis: "[command [subcommand]]", summary: "a command's usage", run: cmdHelp, maxArgs: -1},
	}
}

// operatorAbout is the part of every operator command's help about how it
// reaches the processor.
const operatorAbout = `
It asks over NATS (request-reply on <prefix>.admin.>), each request signed by the operator key of --nkey (else
$` + EnvOperatorNkey + `) and stamped; without a key only a --dev processor answers. The URL is --url, else the
--config file's, else $` + EnvNATSURL + `, else ` + DefaultAdminURL + `. Exit 1: refused or failed; 2: usage.`

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	switch {
	case len(args) == 0:
		usage(stderr)
		return 2
	case isHelp(args[0]):
		usage(stdout)
		return 0
	case args[0] == "--version" || args[0] == "-version":
		// What other tools take: the same as `processor version`.
		args = append([]string{"version"}, args[1:]...)
	}
	return dispatch("", commands(), args, stdin, stdout, stderr)
}

func cmdValidate(c *cmdline, args []string, _ io.Reader) int {
	path := c.fs.String("config", "", "configuration `FILE` (HCL); or give it as the argument")
	pos, code, done := c.parse(args)
	if done {
		return code
	}
	switch {
	case len(pos) == 1 && *path != "" && pos[0] != *path:
		return c.usageError("give the file once: as the argument or as --config")
	case len(pos) == 1:
		*path = pos[0]
	case *path == "":
		return c.usageError("give the configuration file")
	}
	cfg, err := config.Check(*path)
	if err != nil {
		return c.fail(err)
	}
	// Budgets that do not fit the shared streams: the configuration runs,
	// but one host can spend what another needs.
	for _, w := range cfg.BudgetWarnings() {
		fmt.Fprintf(c.stderr, "%s: warning: %s\n", *path, w)
	}
	fmt.Fprintf(c.stdout, "%s: ok\n", *path)
	return 0
}

// cmdVersion: the build's module version, VCS revision and time.
func cmdVersion(c *cmdline, args []string, _ io.Reader) int {
	var out output
	out.register(c.fs)
	if _, code, done := c.parse(args); done {
		return code
	}
	asJSON, err := out.json()
	if err != nil {
		return c.usageError("%v", err)
	}
	v := version.Get()
	if asJSON {
		writeJSON(c.stdout, v)
		return 0
	}
	rev := v.Revision
	if v.Modified {
		rev += " (modified)"
	}
	fmt.Fprintf(c.stdout, "processor %s\nrevision  %s\ntime      %s\ngo        %s\n", v.Version, rev, v.Time, v.GoVersion)
	return 0
}

func cmdRun(c *cmdline, args []string, _ io.Reader) int {
	fs, stdout, stderr := c.fs, c.stdout, c.stderr
	dev := fs.Bool("dev", false, "development mode: embedded NATS without authentication, data under --data, unsigned input allowed, providers \"demo\" (fake) and \"inventory\" (nats)")
	data := fs.String("data", "data", "data directory for --dev")
	listen := fs.String("listen", config.DefaultListen, "with --dev: the embedded NATS server's address")
	metricsListen := fs.String("metrics-listen", config.DefaultMetricsListen, "with --dev: the /metrics address (\"\" disables it)")
	path := fs.String("config", "", "configuration `FILE` (HCL)")
	var level levelFlag
	level.register(c, "the least severe `LEVEL` logged: debug, info, warn or error (refusals are info or warn; repeats debug)")
	if _, code, done := c.parse(args); done {
		return code
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var cfg *config.Config
	switch {
	case *dev && *path != "":
		return c.usageError("--dev and --config exclude each other")
	case *dev:
		cfg = config.Dev(*data)
		cfg.NATS.Listen, cfg.Metrics.Listen = *listen, *metricsListen
		if err := cfg.Validate(); err != nil {
			return c.usageError("%v", err)
		}
	case *path != "":
		if set["listen"] || set["metrics-listen"] || set["data"] {
			return c.usageError("--listen, --metrics-listen and --data go with --dev; set nats.listen and metrics.listen in the configuration")
		}
		// validate's check, the same function: what one refuses the
		// other refuses with the same file:line message.
		loaded, err := config.Check(*path)
		if err != nil {
			return c.fail(err)
		}
		cfg = loaded
	default:
		return c.usageError("give --dev or --config FILE")
	}
	log := newLog(stderr, &level)
	defer engine.LimitMemory(cfg)()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	startCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	p, err := engine.Start(startCtx, engine.Options{Config: cfg, Log: log})
	cancel()
	if err != nil {
		return c.fail(err)
	}
	if *dev {
		metricsURL := "off"
		if a := p.MetricsAddr(); a != "" {
			metricsURL = "http://" + a + "/metrics"
		}
		subj := p.Subjects()
		fmt.Fprintf(stdout, "Portcullis is running (development mode: no NATS authentication, unsigned input admitted).\n"+
			"  NATS JetStream: %s\n  metrics:        %s\n  data:           %s\n  providers:      %s\n"+
			"  agents (MCP):   processor mcp --dev --url %s (docs/agents.md)\n"+
			"Publish proposals as any host <h> on %s; outcomes arrive on %s. Ctrl-C stops.\n",
			p.NATSURL(), metricsURL, *data, config.DevProviders, p.NATSURL(), subj.Proposal("<h>"), subj.Outcome("<h>", "<proposal_id>"))
	}
	select {
	case <-ctx.Done():
		log.Info("signal received; draining")
	case <-p.Done():
	}
	if err := p.Close(); err != nil && !errors.Is(err, context.Canceled) {
		return c.fail(err)
	}
	return 0
}
