package main

import (
	"context"
	"io"
	"log/slog"
	"os/signal"
	"syscall"

	"github.com/portcullis/portcullis/internal/demo"
)

// cmdDemo plays the seed scenarios end to end on a throwaway embedded
// server with in-process connectors and resolver (internal/demo), prints a
// timeline, and leaves nothing behind.
func cmdDemo(c *cmdline, args []string, _ io.Reader) int {
	verbose := c.fs.Bool("verbose", false, "also print the processor's JSON log on standard error")
	keep := c.fs.Bool("keep", false, "keep running after the scenes until Ctrl-C: the indeterminate payment waits for an operator (processor console, or the CLI) and a proposal for approval")
	var level levelFlag
	level.register(c, "with --verbose (which it implies): the least severe `LEVEL` logged: debug, info, warn or error")
	if _, code, done := c.parse(args); done {
		return code
	}
	var log *slog.Logger // nil: no log
	if *verbose || c.set("log-level") {
		log = newLog(c.stderr, &level)
	}
	o := demo.Options{
		Stdout: c.stdout, Log: log,
		CLI: func(args []string, stdout, stderr io.Writer) int { return run(args, nil, stdout, stderr) },
	}
	if *keep {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		o.Keep = ctx
	}
	err := demo.Run(o)
	if err != nil {
		return c.fail(err)
	}
	return 0
}
