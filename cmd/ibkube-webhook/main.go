// Command ibkube-webhook is ibkube's mutating admission webhook for pods.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/ibkube/ibkube/internal/cmdline"
	"github.com/ibkube/ibkube/internal/logging"
	"github.com/ibkube/ibkube/webhook/certs"
	"github.com/ibkube/ibkube/webhook/server"
)

func main() {
	os.Exit(cmdline.Exit(os.Stderr, "ibkube-webhook", run(os.Args[1:])))
}

func run(args []string) error {
	opts, err := parseFlags(args, os.Getenv, os.Stderr)
	if err != nil {
		return err
	}
	if opts.help {
		return nil
	}
	log, err := logging.New(opts.logLevel, opts.logFormat, os.Stderr)
	if err != nil {
		return err
	}
	// controller-runtime logs through its own package logger; give it ours.
	ctrllog.SetLogger(log)
	rest, err := restConfig(opts.kubeconfig)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	cfg := opts.server
	cfg.Rest, cfg.Log = rest, log
	cfg.CertSetup = certs.Setup(opts.certs, log)
	return server.Run(ctx, cfg)
}
