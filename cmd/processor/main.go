// Command processor runs Portcullis and its operator tools.
//
//	processor run --dev                 embedded NATS, unsigned input, fake provider "demo"
//	processor run --config FILE.hcl     as configured
//	processor validate --config FILE    check a configuration
//	processor fingerprint [FILE|-]      a proposal's referent, fingerprint (v2) and idempotency key
//	processor demo                      the seed scenarios end to end, as a timeline
//	processor receipts get FP           a fingerprint's receipts (asks the running processor over NATS)
//	processor activity get FP           a fingerprint's activity snapshot (reads the KV bucket)
//	processor reconcile list            actions whose effect is unknown
//	processor reconcile resolve FP --present|--absent --evidence REF
//	processor keygen KIND --out FILE    a new nkey for a role (or internal: the HMAC key file)
//	processor nats-permissions --config FILE   the authorization block for external servers
//
// See README.md for every subcommand.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/engine"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

type command struct {
	name    string
	summary string
	run     func(args []string, stdin io.Reader, stdout, stderr io.Writer) int
}

func commands() []command {
	return []command{
		{"run", "run the processor (--dev, or --config FILE)", cmdRun},
		{"validate", "check a configuration file (--config FILE)", cmdValidate},
		{"bench", "measure the pipeline end to end on the embedded default", cmdBench},
		{"fingerprint", "print a proposal's grounded referent, fingerprint v2 and idempotency key ([--referent R] [FILE|-])", cmdFingerprint},
		{"demo", "play the seed scenarios end to end on a throwaway embedded server and print the timeline", cmdDemo},
		{"receipts", "receipts get <fingerprint>: a fingerprint's receipt history (asks the running processor)", cmdReceipts},
		{"activity", "activity get <fingerprint>: a fingerprint's value-free activity snapshot (reads the KV bucket)", cmdActivity},
		{"reconcile", "reconcile list | resolve <fingerprint> --present|--absent --evidence REF: the indeterminate queue", cmdReconcile},
		{"keygen", "keygen host|connector|resolver|source|operator|processor --out FILE|--stdout, or keygen internal --out FILE: new keys", cmdKeygen},
		{"nats-permissions", "print the nats-server authorization block for an external server's users (--config FILE)", cmdNATSPermissions},
	}
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(args[1:], stdin, stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "processor: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: processor <command> [flags]")
	fmt.Fprintln(w)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-17s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nprocessor <command> -h shows a command's flags.")
}

func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("processor "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

func cmdValidate(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := newFlags("validate", stderr)
	path := fs.String("config", "", "configuration file (HCL)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *path == "" {
		fmt.Fprintln(stderr, "processor validate: --config is required")
		return 2
	}
	if _, err := config.Load(*path); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	fmt.Fprintf(stdout, "%s: ok\n", *path)
	return 0
}

func cmdRun(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := newFlags("run", stderr)
	dev := fs.Bool("dev", false, "development mode: embedded NATS without authentication, data under --data, unsigned input allowed, fake provider \"demo\"")
	data := fs.String("data", "data", "data directory for --dev")
	listen := fs.String("listen", config.DefaultListen, "with --dev: the embedded NATS server's address")
	metricsListen := fs.String("metrics-listen", config.DefaultMetricsListen, "with --dev: the /metrics address (\"\" disables it)")
	path := fs.String("config", "", "configuration file (HCL)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "processor run: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var cfg *config.Config
	switch {
	case *dev && *path != "":
		fmt.Fprintln(stderr, "processor run: --dev and --config exclude each other")
		return 2
	case *dev:
		cfg = config.Dev(*data)
		cfg.NATS.Listen, cfg.Metrics.Listen = *listen, *metricsListen
		if err := cfg.Validate(); err != nil {
			fmt.Fprintln(stderr, "processor run:", err)
			return 2
		}
	case *path != "":
		if set["listen"] || set["metrics-listen"] || set["data"] {
			fmt.Fprintln(stderr, "processor run: --listen, --metrics-listen and --data go with --dev; set nats.listen and metrics.listen in the configuration")
			return 2
		}
		c, err := config.Load(*path)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		cfg = c
	default:
		fmt.Fprintln(stderr, "processor run: give --dev or --config FILE")
		return 2
	}
	log := slog.New(slog.NewJSONHandler(stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	startCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	p, err := engine.Start(startCtx, engine.Options{Config: cfg, Log: log})
	cancel()
	if err != nil {
		fmt.Fprintln(stderr, "processor:", err)
		return 1
	}
	if *dev {
		metricsURL := "off"
		if a := p.MetricsAddr(); a != "" {
			metricsURL = "http://" + a + "/metrics"
		}
		subj := p.Subjects()
		fmt.Fprintf(stdout, "Portcullis is running (development mode: no NATS authentication, unsigned input admitted).\n"+
			"  NATS JetStream: %s\n  metrics:        %s\n  data:           %s\n  providers:      %s\n"+
			"Publish proposals as any host <h> on %s; outcomes arrive on %s. Ctrl-C stops.\n",
			p.NATSURL(), metricsURL, *data, config.DevProviders, subj.Proposal("<h>"), subj.Outcome("<h>", "<proposal_id>"))
	}
	select {
	case <-ctx.Done():
		log.Info("signal received; draining")
	case <-p.Done():
	}
	if err := p.Close(); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(stderr, "processor:", err)
		return 1
	}
	return 0
}
