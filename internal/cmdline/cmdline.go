// Package cmdline is the one flag-parsing path of every ibkube binary and
// subcommand: a flag set that reports its own errors and -h, the parse step
// that tells a request for usage apart from a bad command line, and the
// exit status and message for an error. A bad command line exits 2 (as the
// flag package's ExitOnError does) with its message printed once.
package cmdline

import (
	"errors"
	"flag"
	"fmt"
	"io"
)

// NewFlagSet returns a flag set named name that returns its errors instead
// of exiting, and writes usage and errors to out.
func NewFlagSet(name string, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(out)
	return fs
}

// UsageError is a bad command line: a flag the set refused, or a check of
// the parsed values that failed.
type UsageError struct {
	Err error
	// Printed: the flag set has written the error and its usage already,
	// so Exit must not write it again.
	Printed bool
}

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// Parse parses args into fs, then runs check on the result. help is true
// when args ask for -h or --help: fs has printed its usage, and neither the
// rest of args nor check count. Errors are *UsageError.
func Parse(fs *flag.FlagSet, args []string, check func() error) (help bool, err error) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return true, nil
		}
		return false, &UsageError{Err: err, Printed: true}
	}
	if err := check(); err != nil {
		return false, &UsageError{Err: err}
	}
	return false, nil
}

// NoArgs is a check refusing positional arguments.
func NoArgs(fs *flag.FlagSet) error {
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q: %s takes flags only", fs.Args(), fs.Name())
	}
	return nil
}

// Exit writes err for prog to w, once, and returns the exit status: 0 for
// no error, 2 for a bad command line (a *UsageError anywhere in err's
// chain), 1 otherwise.
func Exit(w io.Writer, prog string, err error) int {
	if err == nil {
		return 0
	}
	var ue *UsageError
	usage := errors.As(err, &ue)
	if !usage || !ue.Printed {
		fmt.Fprintf(w, "%s: %v\n", prog, err)
	}
	if usage {
		return 2
	}
	return 1
}
