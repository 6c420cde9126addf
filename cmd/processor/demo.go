package main

import (
	"io"
	"log/slog"

	"github.com/portcullis/portcullis/internal/demo"
)

// cmdDemo plays the seed scenarios end to end on a throwaway embedded
// server with in-process connectors and resolver (internal/demo), prints a
// timeline, and leaves nothing behind.
func cmdDemo(c *cmdline, args []string, _ io.Reader) int {
	verbose := c.fs.Bool("verbose", false, "also print the processor's JSON log on standard error")
	var level levelFlag
	level.register(c, "with --verbose (which it implies): the least severe `LEVEL` logged: debug, info, warn or error")
	if _, code, done := c.parse(args); done {
		return code
	}
	var log *slog.Logger // nil: no log
	if *verbose || c.set("log-level") {
		log = newLog(c.stderr, &level)
	}
	err := demo.Run(demo.Options{
		Stdout: c.stdout, Log: log,
		CLI: func(args []string, stdout, stderr io.Writer) int { return run(args, nil, stdout, stderr) },
	})
	if err != nil {
		return c.fail(err)
	}
	return 0
}
