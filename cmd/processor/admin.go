package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/portcullis/portcullis/internal/admin"
	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/subjects"
)

// DefaultAdminURL is where the operator commands look for a processor by
// default: the embedded server of `processor run --dev`.
const DefaultAdminURL = "nats://127.0.0.1:4222"

// conn holds the flags every operator command shares: where the running
// processor's NATS is and under which prefix it answers.
type conn struct {
	url, creds, prefix, config string
	timeout                    time.Duration
	json                       bool
}

func (c *conn) register(fs *flag.FlagSet) {
	fs.StringVar(&c.url, "url", DefaultAdminURL, "NATS URL of the running processor")
	fs.StringVar(&c.creds, "creds", "", "NATS credentials file (.creds)")
	fs.StringVar(&c.prefix, "prefix", subjects.DefaultPrefix, "subject prefix of the processor")
	fs.StringVar(&c.config, "config", "", "take --url, --creds and --prefix from the processor's configuration file (flags given explicitly win)")
	fs.DurationVar(&c.timeout, "timeout", admin.DefaultTimeout, "how long to wait for the processor's answer")
	fs.BoolVar(&c.json, "json", false, "print the processor's answer as JSON")
}

// resolve applies --config to the flags not given explicitly.
func (c *conn) resolve(fs *flag.FlagSet) error {
	if c.config == "" {
		return nil
	}
	cfg, err := config.Load(c.config)
	if err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["prefix"] {
		c.prefix = cfg.Prefix
	}
	if !set["url"] {
		if cfg.NATS.Embedded {
			host, port, err := net.SplitHostPort(cfg.NATS.Listen)
			if err != nil {
				return fmt.Errorf("nats.listen: %w", err)
			}
			if host == "" || host == "0.0.0.0" || host == "::" {
				host = "127.0.0.1"
			}
			c.url = "nats://" + net.JoinHostPort(host, port)
		} else {
			c.url = cfg.NATS.URL
		}
	}
	if !set["creds"] && cfg.NATS.Credentials != "" {
		c.creds = cfg.NATS.Credentials
	}
	return nil
}

func (c *conn) connect() (*nats.Conn, subjects.Subjects, error) {
	subj, err := subjects.New(c.prefix)
	if err != nil {
		return nil, subjects.Subjects{}, err
	}
	opts := []nats.Option{nats.Name("portcullis-operator"), nats.Timeout(5 * time.Second)}
	if c.creds != "" {
		opts = append(opts, nats.UserCredentials(c.creds))
	}
	nc, err := nats.Connect(c.url, opts...)
	if err != nil {
		return nil, subjects.Subjects{}, fmt.Errorf("cannot reach NATS at %s: %w", c.url, err)
	}
	return nc, subj, nil
}

func (c *conn) client() (*admin.Client, func(), error) {
	nc, subj, err := c.connect()
	if err != nil {
		return nil, nil, err
	}
	return &admin.Client{NC: nc, Subjects: subj, Timeout: c.timeout}, nc.Close, nil
}

// parseInterspersed parses flags that may come before or after the
// positional arguments, and returns the positional ones.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for rest := args; ; {
		if err := fs.Parse(rest); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		rest = fs.Args()[1:]
	}
}

// fail prints an operator command's error and returns its exit status.
func fail(stderr io.Writer, cmd string, err error) int {
	switch {
	case errors.Is(err, admin.ErrNoProcessor):
		fmt.Fprintf(stderr, "processor %s: %v: is a processor with this --prefix running on this NATS server?\n", cmd, err)
	default:
		fmt.Fprintf(stderr, "processor %s: %v\n", cmd, err)
	}
	return 1
}

// fingerprintArg reads a fingerprint argument ("sha256:<hex>" or the hex
// digits alone).
func fingerprintArg(stderr io.Writer, cmd string, pos []string) (string, bool) {
	if len(pos) != 1 {
		fmt.Fprintf(stderr, "processor %s: give exactly one fingerprint\n", cmd)
		return "", false
	}
	fp, ok := admin.NormalizeFingerprint(pos[0])
	if !ok {
		fmt.Fprintf(stderr, "processor %s: %q is not a fingerprint (sha256:<64 hex digits>)\n", cmd, pos[0])
		return "", false
	}
	return fp, true
}

func formatMs(ms int64) string {
	if ms <= 0 {
		return "-"
	}
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
