// Package cmdline holds the flag plumbing the ibkube commands share: a flag
// set that reports its own errors and -h, and the parse step that tells a
// request for usage apart from a bad command line.
package cmdline

import (
	"errors"
	"flag"
	"io"
)

// NewFlagSet returns a flag set named name that returns its errors instead
// of exiting, and writes usage and errors to out.
func NewFlagSet(name string, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(out)
	return fs
}

// Parse parses args into fs, then runs check on the result. help is true
// when args ask for -h or --help: fs has printed its usage, and neither the
// rest of args nor check count.
func Parse(fs *flag.FlagSet, args []string, check func() error) (help bool, err error) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return true, nil
		}
		return false, err
	}
	return false, check()
}
