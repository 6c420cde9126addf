package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/nats-io/nkeys"

	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/schema/keyfile"
)

// keygenKinds are the identities `processor keygen` makes an nkey for: the
// five role blocks, and the processor's own login to an external server
// (nats.credentials). Every one is a user nkey; the kind only shapes the
// advice printed.
var keygenKinds = []string{config.KindHost, config.KindConnector, config.KindResolver, config.KindSource, config.KindOperator, "processor"}

// cmdKeygen makes a new user nkey and prints its public key (one line, for
// the block's public_key); the seed goes to --out FILE (created with mode
// 0600, never overwritten), and with --stdout is printed after it as well
// (or only there, without --out). `keygen internal --out FILE` makes an
// internal HMAC key file.
func cmdKeygen(c *cmdline, args []string, _ io.Reader) int {
	stdout, stderr := c.stdout, c.stderr
	out := c.fs.String("out", "", "write the secret to `FILE` (mode 0600; an existing file is never overwritten)")
	toStdout := c.fs.Bool("stdout", false, "print the seed on standard output too, after the public key (alone, without --out)")
	public := c.fs.String("public", "", "make nothing: print the public key of the nkey seed in `FILE` (a block's public_key)")
	pos, code, done := c.parse(args)
	if done {
		return code
	}
	if *public != "" {
		if len(pos) != 0 || *out != "" || *toStdout {
			return c.usageError("--public FILE takes no kind, --out or --stdout: it only reads the seed")
		}
		kp, err := keyfile.LoadSeed(*public)
		if err != nil {
			return c.fail(fmt.Errorf("--public: %w", err))
		}
		defer kp.Wipe()
		pub, err := kp.PublicKey()
		if err != nil {
			return c.fail(err)
		}
		fmt.Fprintln(stdout, pub)
		return 0
	}
	if len(pos) != 1 {
		return c.usageError("give the kind of key")
	}
	kind := pos[0]
	if kind == "internal" {
		if *toStdout || *out == "" {
			return c.usageError("internal: give --out FILE (the key is never printed)")
		}
		if _, err := keyfile.CreateInternal(*out); err != nil {
			return keygenFailed(c, *out, err)
		}
		fmt.Fprintf(stderr, "wrote a new internal key to %s (mode 0600): name it in internal.key_file; processors that share work share this file's content\n", *out)
		return 0
	}
	known := false
	for _, k := range keygenKinds {
		known = known || k == kind
	}
	if !known {
		return c.usageError("unknown kind %q", kind)
	}
	if *out == "" && !*toStdout {
		return c.usageError("%s: give --out FILE (the seed, mode 0600), --stdout (print it), or both", kind)
	}

	kp, err := nkeys.CreateUser()
	if err != nil {
		return c.fail(err)
	}
	defer kp.Wipe()
	pub, err := kp.PublicKey()
	if err != nil {
		return c.fail(err)
	}
	use := "put the public key in its " + kind + " block's public_key"
	if kind == "processor" {
		use = "name the seed file in nats.credentials; `processor nats-permissions` grants this key"
	}
	if *out != "" {
		// The seed is on disk before the public key is shown: a key
		// printed is a key that can log in.
		if err := keyfile.WriteSeed(*out, kp); err != nil {
			return keygenFailed(c, *out, err)
		}
	}
	fmt.Fprintln(stdout, pub)
	if *toStdout {
		seed, err := kp.Seed()
		if err != nil {
			return c.fail(err)
		}
		fmt.Fprintf(stdout, "# nkey seed of this %s: SECRET, keep it only where it runs, in a file of mode 0600:\n%s\n", kind, seed)
	}
	if *out != "" {
		fmt.Fprintf(stderr, "wrote the %s's nkey seed to %s (mode 0600); %s\n", kind, *out, use)
	} else {
		fmt.Fprintf(stderr, "%s\n", use)
	}
	return 0
}

func keygenFailed(c *cmdline, path string, err error) int {
	if errors.Is(err, os.ErrExist) {
		return c.fail(fmt.Errorf("%s already exists; refusing to overwrite it", path))
	}
	return c.fail(err)
}
