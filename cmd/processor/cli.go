package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// command is one node of the command tree: a command that runs (run set)
// or a group of subcommands (subs set).
type command struct {
	name string
	// synopsis follows the command's path in its usage line.
	synopsis string
	// summary is its line in its parent's list.
	summary string
	// about is the rest of its -h text.
	about string
	// maxArgs is how many positional arguments it takes at most (-1: any).
	maxArgs int
	run     func(c *cmdline, args []string, stdin io.Reader) int
	subs    []command
}

// cmdline is a running command: its flags, its usage and its outputs.
// Every command shares these conventions: -h and --help print the usage on
// standard output and exit 0; a usage error prints the error and the usage
// line on standard error and exits 2; flags may come before, between or
// after the positional arguments ("--" ends the flags); positional
// arguments beyond the command's maxArgs are refused.
type cmdline struct {
	path, synopsis, about string
	maxArgs               int
	fs                    *flag.FlagSet
	stdout, stderr        io.Writer
}

func newCmdline(path string, c command, stdout, stderr io.Writer) *cmdline {
	fs := flag.NewFlagSet("processor "+path, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {} // -h prints help (on stdout), a flag error the usage line: both below
	return &cmdline{path: path, synopsis: c.synopsis, about: c.about, maxArgs: c.maxArgs, fs: fs, stdout: stdout, stderr: stderr}
}

func (c *cmdline) usageLine() string {
	return strings.TrimSpace("usage: processor " + c.path + " " + c.synopsis)
}

// help prints the command's help on standard output.
func (c *cmdline) help() {
	w := c.stdout
	fmt.Fprintln(w, c.usageLine())
	if c.about != "" {
		fmt.Fprintf(w, "\n%s\n", strings.TrimRight(c.about, "\n"))
	}
	hasFlags := false
	c.fs.VisitAll(func(*flag.Flag) { hasFlags = true })
	if hasFlags {
		fmt.Fprintln(w, "\nflags:")
		printFlags(w, c.fs)
	}
}

// printFlags lists a command's flags as they are usually written: --name
// (-o for a one-letter one), its value's kind, its use and default.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		dash := "--"
		if len(f.Name) == 1 {
			dash = "-"
		}
		kind, use := flag.UnquoteUsage(f)
		line := "  " + dash + f.Name
		switch kind {
		case "":
		case "string":
			line += " VALUE"
		default:
			line += " " + strings.ToUpper(kind)
		}
		if def := f.DefValue; def != "" && def != "false" && def != "0" {
			use += fmt.Sprintf(" (default %s)", def)
		}
		fmt.Fprintf(w, "%s\n      %s\n", line, use)
	})
}

// usageError reports a usage error on standard error and returns exit
// status 2.
func (c *cmdline) usageError(format string, args ...any) int {
	fmt.Fprintf(c.stderr, "processor %s: %s\n%s\n", c.path, fmt.Sprintf(format, args...), c.usageLine())
	return 2
}

// fail reports a failure (not a usage error) and returns exit status 1.
func (c *cmdline) fail(err error) int { return fail(c.stderr, c.path, err) }

// parse parses the flags, wherever they are, and returns the positional
// arguments. done means the command ends with code: after -h (0) or a
// usage error (2).
func (c *cmdline) parse(args []string) (pos []string, code int, done bool) {
	for rest := args; ; {
		err := c.fs.Parse(rest)
		if errors.Is(err, flag.ErrHelp) {
			c.help()
			return nil, 0, true
		}
		if err != nil {
			// The flag package printed the error.
			fmt.Fprintf(c.stderr, "%s\n(processor %s -h lists the flags)\n", c.usageLine(), c.path)
			return nil, 2, true
		}
		left := c.fs.Args()
		if len(left) == 0 {
			break
		}
		if used := len(rest) - len(left); used > 0 && rest[used-1] == "--" {
			pos = append(pos, left...) // after "--" everything is an argument
			break
		}
		pos = append(pos, left[0])
		rest = left[1:]
	}
	if c.maxArgs >= 0 && len(pos) > c.maxArgs {
		return nil, c.usageError("unexpected argument %q", pos[c.maxArgs]), true
	}
	return pos, 0, false
}

// set reports whether the flag name was given.
func (c *cmdline) set(name string) bool {
	found := false
	c.fs.Visit(func(f *flag.Flag) { found = found || f.Name == name })
	return found
}

// isHelp reports whether an argument asks for help.
func isHelp(a string) bool { return a == "-h" || a == "--help" || a == "-help" }

// dispatch runs the command at args[0] among cmds (the children of path,
// "" at the top).
func dispatch(path string, cmds []command, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	for _, c := range cmds {
		if c.name != args[0] {
			continue
		}
		full := strings.TrimSpace(path + " " + c.name)
		if c.run != nil {
			return c.run(newCmdline(full, c, stdout, stderr), args[1:], stdin)
		}
		return runGroup(full, c, args[1:], stdin, stdout, stderr)
	}
	where := "processor"
	if path != "" {
		where += " " + path
	}
	fmt.Fprintf(stderr, "%s: unknown command %q\n\n", where, args[0])
	if path == "" {
		usage(stderr)
	} else {
		groupUsage(stderr, path, cmds)
	}
	return 2
}

// runGroup runs a group: its subcommand, or its usage (-h: on standard
// output, exit 0; nothing or an unknown subcommand: on standard error,
// exit 2).
func runGroup(path string, g command, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	switch {
	case len(args) == 0:
		groupUsage(stderr, path, g.subs)
		return 2
	case isHelp(args[0]):
		groupUsage(stdout, path, g.subs)
		if g.about != "" {
			fmt.Fprintf(stdout, "\n%s\n", strings.TrimRight(g.about, "\n"))
		}
		fmt.Fprintf(stdout, "\nprocessor %s <subcommand> -h shows a subcommand's flags.\n", path)
		return 0
	}
	return dispatch(path, g.subs, args, stdin, stdout, stderr)
}

func groupUsage(w io.Writer, path string, subs []command) {
	for i, s := range subs {
		lead := "usage: "
		if i > 0 {
			lead = "       "
		}
		fmt.Fprintln(w, lead+strings.TrimSpace("processor "+path+" "+s.name+" "+s.synopsis))
	}
}

// leaves lists every command that runs, by path ("receipts get"), in
// table order.
func leaves(cmds []command, prefix string) []string {
	var out []string
	for _, c := range cmds {
		p := strings.TrimSpace(prefix + " " + c.name)
		if c.run != nil {
			out = append(out, p)
		}
		out = append(out, leaves(c.subs, p)...)
	}
	return out
}

// find returns the command at path (its words), if any.
func find(cmds []command, words []string) (command, bool) {
	for _, c := range cmds {
		if c.name != words[0] {
			continue
		}
		if len(words) == 1 {
			return c, true
		}
		return find(c.subs, words[1:])
	}
	return command{}, false
}

// usage prints the top-level usage: every command that runs, by path.
func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: processor <command> [arguments] [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "commands:")
	var walk func(cmds []command, prefix string)
	walk = func(cmds []command, prefix string) {
		for _, c := range cmds {
			p := strings.TrimSpace(prefix + " " + c.name)
			if c.run != nil {
				fmt.Fprintf(w, "  %-19s %s\n", p, c.summary)
			}
			walk(c.subs, p)
		}
	}
	walk(commands(), "")
	fmt.Fprintln(w, "\nprocessor help <command> (or processor <command> -h) shows a command's arguments and flags;")
	fmt.Fprintln(w, "processor --version is processor version.")
}

// cmdHelp: `processor help [command [subcommand]]`.
func cmdHelp(c *cmdline, args []string, _ io.Reader) int {
	pos, code, done := c.parse(args)
	if done {
		return code
	}
	if len(pos) == 0 {
		usage(c.stdout)
		return 0
	}
	cmd, ok := find(commands(), pos)
	if !ok {
		// Walk as far as the path goes, to say what is wrong.
		for i := range pos {
			prefix, found := find(commands(), pos[:i+1])
			if !found {
				break
			}
			if prefix.run != nil && i+1 < len(pos) {
				return c.usageError("unexpected argument %q", pos[i+1])
			}
		}
		return c.usageError("no command %q", strings.Join(pos, " "))
	}
	path := strings.Join(pos, " ")
	if cmd.run != nil {
		return cmd.run(newCmdline(path, cmd, c.stdout, c.stderr), []string{"-h"}, nil)
	}
	return runGroup(path, cmd, []string{"-h"}, nil, c.stdout, c.stderr)
}
