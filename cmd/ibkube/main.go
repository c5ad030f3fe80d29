// Command ibkube is the ibkube CLI: offline injection, the node inventory and
// the node doctor. Each subcommand lives in its own file as
// run<Name>(ctx, args, stdio) error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/ibkube/ibkube/internal/cmdline"
)

// stdio carries the streams a subcommand reads and writes, so tests can run
// subcommands without touching the process's own.
type stdio struct {
	in       io.Reader
	out, err io.Writer
}

// exitError asks main to exit with a given code after printing nothing more
// (the subcommand already reported, e.g. doctor's failed checks).
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// parse is every subcommand's command line (cmdline.Parse), its errors
// starting with the subcommand's name (every error a subcommand returns
// does: main writes "ibkube " before it). check refuses what the flag
// package cannot: a bad -o value, a malformed list, positional arguments;
// a refusal there is a usage error as much as an unknown flag is. done is
// true when the subcommand must stop: after -h (fs has printed its usage,
// err is nil) or on a bad command line (err is a *cmdline.UsageError: exit
// status 2, printed once).
func parse(name string, fs *flag.FlagSet, args []string, check func() error) (done bool, err error) {
	help, err := cmdline.Parse(fs, args, check)
	if err != nil {
		return true, fmt.Errorf("%s: %w", name, err)
	}
	return help, nil
}

type subcommand struct {
	name, summary string
	run           func(ctx context.Context, args []string, s stdio) error
}

func subcommands() []subcommand {
	return []subcommand{
		{"inject", "apply ibkube's admission mutation to YAML offline", runInject},
		{"node", "print the node's HCA inventory as the agent sees it", runNode},
		{"doctor", "check this node for the RDMA problems users hit most", runDoctor},
		{"policy", "write the admission as API server policies (no webhook)", runPolicy},
		{"version", "print the ibkube version", runVersion},
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: ibkube <command> [flags]\n\ncommands:")
	for _, c := range subcommands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'ibkube <command> -h' for a command's flags.")
}

func run(ctx context.Context, args []string, s stdio) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(s.out)
		return nil
	}
	for _, c := range subcommands() {
		if c.name == args[0] {
			return c.run(ctx, args[1:], s)
		}
	}
	usage(s.err)
	names := make([]string, 0, len(subcommands()))
	for _, c := range subcommands() {
		names = append(names, c.name)
	}
	return &cmdline.UsageError{Err: fmt.Errorf("%s: unknown command; accepted: %s", args[0], strings.Join(names, ", "))}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], stdio{in: os.Stdin, out: os.Stdout, err: os.Stderr})
	stop()
	os.Exit(exitStatus(os.Stderr, err))
}

// exitStatus reports err on w, once, and returns the status to exit with:
// a subcommand's own (doctor's failed checks), 2 for a bad command line,
// 1 for any other error. A subcommand's errors start with its name, so the
// line reads "ibkube node: ...", as the command was typed.
func exitStatus(w io.Writer, err error) int {
	var ee exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	var ue *cmdline.UsageError
	if err != nil && (!errors.As(err, &ue) || !ue.Printed) {
		fmt.Fprintf(w, "ibkube %v\n", err)
	}
	return cmdline.Exit(io.Discard, "ibkube", err)
}
