package main

import (
	"fmt"
	"io"

	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/natsauth"
	"github.com/portcullis/portcullis/schema/keyfile"
	"github.com/portcullis/portcullis/subjects"
)

// cmdNATSPermissions prints the nats-server `accounts` block that grants
// the table of SPEC §2.8 for a configuration's roles and the processor's
// own nkey user (the key of nats.credentials), for the servers of an
// external deployment: each role an account of its own, importing only its
// subjects from the processor's account, which alone has JetStream.
func cmdNATSPermissions(c *cmdline, args []string, _ io.Reader) int {
	stdout, stderr := c.stdout, c.stderr
	path := c.fs.String("config", "", "the processor's configuration `FILE` (HCL), with nats.url and nats.credentials")
	if _, code, done := c.parse(args); done {
		return code
	}
	if *path == "" {
		return c.usageError("--config is required")
	}
	const cmd = "processor nats-permissions"
	cfg, err := config.Load(*path)
	if err != nil {
		return c.fail(err)
	}
	if cfg.NATS.Embedded {
		fmt.Fprintf(stderr, "%s: %s runs the embedded server, which builds these accounts and users itself at every start; this command is for external servers (nats.url)\n", cmd, *path)
		return 1
	}
	creds := cfg.NATS.Credentials
	if creds == "" {
		fmt.Fprintf(stderr, "%s: %s sets no nats.credentials: the processor needs its own nkey to log in (`processor keygen processor --out FILE`, then nats.credentials = FILE)\n", cmd, *path)
		return 1
	}
	jwt, err := keyfile.IsCreds(creds)
	if err != nil {
		fmt.Fprintf(stderr, "%s: nats.credentials: %v\n", cmd, err)
		return 1
	}
	if jwt {
		fmt.Fprintf(stderr, "%s: nats.credentials %s is a JWT .creds file: with decentralized (JWT) auth the permissions live in the users' JWTs, signed by their account, not in server configuration; this command prints nkey users in an `accounts` block. Grant the table of SPEC §2.8 with your JWT tooling, or log the processor in with an nkey seed file.\n", cmd, creds)
		return 1
	}
	kp, err := keyfile.LoadSeed(creds)
	if err != nil {
		fmt.Fprintf(stderr, "%s: nats.credentials: %v\n", cmd, err)
		return 1
	}
	pub, err := kp.PublicKey()
	kp.Wipe()
	if err != nil {
		fmt.Fprintf(stderr, "%s: nats.credentials: %v\n", cmd, err)
		return 1
	}
	subj, err := subjects.New(cfg.Prefix)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", cmd, err)
		return 1
	}
	block, err := natsauth.AccountsBlock(cfg, subj, pub)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", cmd, err)
		return 1
	}
	fmt.Fprint(stdout, block)
	return 0
}
