package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/internal/cmdline"
	"github.com/ibkube/ibkube/webhook/config"
	"github.com/ibkube/ibkube/webhook/inject"
)

const injectUsage = `usage: ibkube inject -f FILE|- [--config FILE] [--namespace-labels k=v,...] [--namespace-annotations k=v,...]

Applies the admission webhook's mutation to Kubernetes YAML and writes the
result to stdout: Pods, workloads with pod templates (Deployment,
StatefulSet, DaemonSet, Job, CronJob) and custom resources such as
PyTorchJob, MPIJob, JobSet and Kubeflow Trainer runtimes, in multi-document
streams. Other objects pass through unchanged, a TrainJob too (the webhook
injects its pods at admission). All or nothing: if any document is refused,
nothing is written to stdout and the command exits non-zero naming every
refused document by its position with the webhook's message; warnings go to
stderr. Documents left unchanged, and the "---" lines with their comments,
come back byte for byte.

flags:
`

// runInject implements "ibkube inject".
func runInject(_ context.Context, args []string, s stdio) error {
	fs := cmdline.NewFlagSet("ibkube inject", s.err)
	file := fs.String("f", "", "YAML file to read, - for stdin (required)")
	cfgPath := fs.String("config", "", "WebhookConfig YAML (default: built-in defaults)")
	labels := fs.String("namespace-labels", "", "the namespace's labels, k=v,... (default: "+contract.LabelInject+"="+contract.InjectEnabled+"); include pod-security.kubernetes.io/enforce=... to model Pod Security")
	annos := fs.String("namespace-annotations", "", "the namespace's annotations, k=v,... (e.g. "+contract.AnnotationMode+"="+contract.ModeShared+")")
	release := fs.String("release-namespace", "ibkube-system", "namespace ibkube is installed in (default namespace of the IPoIB network)")
	fs.Usage = func() {
		fmt.Fprint(s.err, injectUsage)
		fs.PrintDefaults()
	}
	opts := inject.Options{}
	if done, err := parse("inject", fs, args, func() (err error) {
		if *file == "" || fs.NArg() > 0 {
			fs.Usage()
			return errors.New("-f FILE or -f - is required, and no positional arguments")
		}
		if opts.Labels, err = parseKV("--namespace-labels", *labels); err != nil {
			return err
		}
		opts.Annotations, err = parseKV("--namespace-annotations", *annos)
		return err
	}); done {
		return err
	}
	cfg, err := webhookConfig("inject", *cfgPath, *release)
	if err != nil {
		return err
	}
	opts.Config = cfg

	var in io.Reader = s.in
	if *file != "-" {
		f, err := os.Open(*file)
		if err != nil {
			return fmt.Errorf("inject: %w", err)
		}
		defer f.Close()
		in = f
	}
	warnings, err := inject.Stream(in, s.out, opts)
	for _, w := range warnings {
		fmt.Fprintln(s.err, "Warning:", w)
	}
	if err != nil {
		var refused *inject.Error
		if errors.As(err, &refused) {
			return fmt.Errorf("inject: denied, nothing written: %w", err)
		}
		return fmt.Errorf("inject: %w", err)
	}
	return nil
}

// parseKV reads k=v,k=v. A part without "=" continues the previous value,
// so infiniband.azure.com/mode=rdma-shared,ipoib works unquoted. An empty v
// is nil: the flag was not given.
func parseKV(flagName, v string) (map[string]string, error) {
	if v == "" {
		return nil, nil
	}
	out := map[string]string{}
	last := ""
	for _, part := range strings.Split(v, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, val, ok := strings.Cut(part, "=")
		switch {
		case !ok && last != "":
			out[last] += "," + part
		case !ok || k == "":
			return nil, fmt.Errorf("%s: invalid entry %q: want key=value[,key=value...]", flagName, part)
		default:
			out[k] = val
			last = k
		}
	}
	return out, nil
}

// webhookConfig is the WebhookConfig at path (empty: the built-in one) for
// the release in namespace release, as the chart hands it to the webhook;
// errors start with cmd, the subcommand.
func webhookConfig(cmd, path, release string) (*config.Config, error) {
	cfg := config.Default()
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", cmd, err)
		}
		if cfg, err = config.Parse(data); err != nil {
			return nil, fmt.Errorf("%s: config %s: %w", cmd, path, err)
		}
	}
	cfg.ReleaseNamespace = release
	return cfg, nil
}
