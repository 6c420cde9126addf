package main

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// levelFlag is --log-level: debug, info (the default), warn or error.
type levelFlag struct{ level slog.Level }

func (f *levelFlag) String() string { return strings.ToLower(f.level.String()) }

func (f *levelFlag) Set(s string) error {
	switch strings.ToLower(s) {
	case "debug":
		f.level = slog.LevelDebug
	case "info":
		f.level = slog.LevelInfo
	case "warn", "warning":
		f.level = slog.LevelWarn
	case "error":
		f.level = slog.LevelError
	default:
		return fmt.Errorf("the levels are debug, info, warn and error")
	}
	return nil
}

// Level makes the flag a slog.Leveler.
func (f *levelFlag) Level() slog.Level { return f.level }

func (f *levelFlag) register(c *cmdline, use string) {
	c.fs.Var(f, "log-level", use)
}

// newLog is the processor's JSON log on w, from level up.
func newLog(w io.Writer, level slog.Leveler) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level}))
}
