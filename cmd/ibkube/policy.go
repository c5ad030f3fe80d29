package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/ibkube/ibkube/internal/cmdline"
	"github.com/ibkube/ibkube/webhook/policy"
)

const policyUsage = `usage: ibkube policy [--config FILE] [--release-namespace NS] [--prefix NAME] [--exclude-namespaces a,b] [--chart-data]

Writes ibkube's admission as API server policies to stdout, for clusters that
run no webhook: the ConfigMap of parameters rendered from the WebhookConfig,
a MutatingAdmissionPolicy doing the injection, a ValidatingAdmissionPolicy
refusing what the webhook refuses, and their bindings (opted-in namespaces,
never the release namespace or kube-system). Apply them with
kubectl apply --server-side -f -. A changed profile needs only the ConfigMap
re-applied. docs/admission-policy.md lists what the policies do not do.

--chart-data writes instead the chart's copy of the policies' CEL and of the
built-in profiles (charts/ibkube/files/admission-policy.yaml).

flags:
`

// runPolicy implements "ibkube policy".
func runPolicy(_ context.Context, args []string, s stdio) error {
	fs := cmdline.NewFlagSet("policy", s.err)
	cfgPath := fs.String("config", "", "WebhookConfig YAML (default: built-in defaults)")
	release := fs.String("release-namespace", "ibkube-system", "namespace ibkube is installed in: holds the parameter ConfigMap, default namespace of the IPoIB network")
	prefix := fs.String("prefix", "ibkube", "start of every object name")
	exclude := fs.String("exclude-namespaces", "", "namespaces never admitted through the policies, a,b,... (besides the release namespace and kube-system)")
	chartData := fs.Bool("chart-data", false, "write the chart's data file instead of the objects")
	fs.Usage = func() {
		fmt.Fprint(s.err, policyUsage)
		fs.PrintDefaults()
	}
	var names policy.Names
	if done, err := parse("policy", fs, args, func() error {
		if fs.NArg() > 0 {
			fs.Usage()
			return fmt.Errorf("unexpected argument %q; accepted: flags only", fs.Arg(0))
		}
		names = policy.Names{Prefix: *prefix, Namespace: *release, ExcludeNamespaces: splitList(*exclude)}
		return flagError(names.Validate())
	}); done {
		return err
	}
	if *chartData {
		out, err := policy.ChartData()
		if err != nil {
			return fmt.Errorf("policy: %w", err)
		}
		_, err = s.out.Write(out)
		return err
	}
	cfg, err := webhookConfig("policy", *cfgPath, *release)
	if err != nil {
		return err
	}
	objs, err := policy.Render(cfg, names)
	if err != nil {
		return fmt.Errorf("policy: %w", err)
	}
	out, err := objs.YAML()
	if err != nil {
		return fmt.Errorf("policy: %w", err)
	}
	_, err = s.out.Write(out)
	return err
}

// splitList is a comma-separated flag value's items, trimmed; an empty
// value has none, and an empty item stays, to be refused by name.
func splitList(v string) []string {
	if strings.TrimSpace(v) == "" {
		return nil
	}
	items := strings.Split(v, ",")
	for i := range items {
		items[i] = strings.TrimSpace(items[i])
	}
	return items
}

// flagError names the flag behind a policy.Names refusal.
func flagError(err error) error {
	var ne *policy.NameError
	if !errors.As(err, &ne) {
		return err
	}
	flag := map[string]string{"Namespace": "--release-namespace", "Prefix": "--prefix", "ExcludeNamespaces": "--exclude-namespaces"}[ne.Field]
	return fmt.Errorf("%s: %w", flag, err)
}
