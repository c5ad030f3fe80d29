// Package logging builds the binaries' structured loggers (logr over
// log/slog) from their --log-level and --log-format flags.
package logging

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/go-logr/logr"
)

// ParseLevel reads a --log-level value: error, info or debug (logr V(1)).
func ParseLevel(s string) (slog.Level, error) {
	switch s {
	case "error":
		return slog.LevelError, nil
	case "info":
		return slog.LevelInfo, nil
	case "debug":
		// logr V(1) maps to slog level -1, above LevelDebug.
		return slog.LevelDebug, nil
	}
	return 0, fmt.Errorf("--log-level %q: want error, info or debug", s)
}

// CheckFormat reads a --log-format value: json or text.
func CheckFormat(s string) error {
	if s != "json" && s != "text" {
		return fmt.Errorf("--log-format %q: want json or text", s)
	}
	return nil
}

// New returns a logger writing lines in format (json or text) to w, from
// level up.
func New(level, format string, w io.Writer) (logr.Logger, error) {
	lvl, err := ParseLevel(level)
	if err != nil {
		return logr.Logger{}, err
	}
	if err := CheckFormat(format); err != nil {
		return logr.Logger{}, err
	}
	ho := &slog.HandlerOptions{Level: lvl}
	if format == "text" {
		return logr.FromSlogHandler(slog.NewTextHandler(w, ho)), nil
	}
	return logr.FromSlogHandler(slog.NewJSONHandler(w, ho)), nil
}
