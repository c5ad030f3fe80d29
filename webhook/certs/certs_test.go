package certs

import (
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/ibkube/ibkube/internal/testing/errtest"
)

func parse(t *testing.T, args ...string) Options {
	t.Helper()
	var o Options
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parse %q: %v", args, err)
	}
	return o
}

func TestValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		ns   string
		dir  string
		want []string // substrings of the error; none = valid
	}{
		{name: "self with defaults", ns: "ibkube-system", dir: "/tmp/certs"},
		{name: "external needs nothing", args: []string{"--cert-management=external"}},
		{name: "unknown mode", args: []string{"--cert-management=cert-manager"}, ns: "x", dir: "/d",
			want: []string{`--cert-management "cert-manager": want self or external`}},
		{name: "self without namespace and dir", want: []string{"--namespace", "--cert-dir"}},
		{name: "bad names", args: []string{"--cert-secret-name=Bad_Name", "--webhook-config-name=", "--service-name=1svc"}, ns: "x", dir: "/d",
			want: []string{`--cert-secret-name "Bad_Name"`, `--webhook-config-name ""`, `--service-name "1svc"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := parse(t, tc.args...)
			o.Namespace, o.CertDir = tc.ns, tc.dir
			err := o.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			errtest.Names(t, err, tc.want...)
		})
	}
}

func TestDNSNames(t *testing.T) {
	t.Parallel()
	o := Options{ServiceName: "ibkube-webhook", Namespace: "ibkube-system"}
	want := []string{"ibkube-webhook.ibkube-system.svc", "ibkube-webhook.ibkube-system.svc.cluster.local"}
	if diff := cmp.Diff(want, o.DNSNames()); diff != "" {
		t.Errorf("DNSNames (-want +got):\n%s", diff)
	}
}

func TestSetupExternalIsNil(t *testing.T) {
	t.Parallel()
	if Setup(Options{Management: ManagementExternal}, logr.Discard()) != nil {
		t.Error("Setup for external certificates returned a setup function; the server must not start a rotator")
	}
}

func readFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	got := map[string]string{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		got[e.Name()] = string(b)
	}
	return got
}

// The syncer is what makes a rotation reach the running server: the
// files must follow the Secret, and nothing else may be left in the dir.
func TestFileSyncFollowsTheSecret(t *testing.T) {
	t.Parallel()
	key := types.NamespacedName{Namespace: "ibkube-system", Name: "ibkube-webhook-tls"}
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(secret).Build()
	dir := filepath.Join(t.TempDir(), "serving-certs")
	f := &fileSync{reader: c, key: key, dir: dir, log: logr.Discard()}
	ctx := context.Background()

	// The chart creates the Secret empty; until a rotator fills it there is nothing to write.
	if changed, err := f.sync(ctx); !errors.Is(err, errNotYet) || changed {
		t.Fatalf("empty secret: changed=%v err=%v, want errNotYet and no write", changed, err)
	}

	steps := []struct {
		name        string
		crt, key    string
		wantChanged bool
	}{
		{"first certificate", "crt-1", "key-1", true},
		{"unchanged secret", "crt-1", "key-1", false},
		{"rotated", "crt-2", "key-2", true},
	}
	for _, s := range steps {
		if err := c.Get(ctx, key, secret); err != nil {
			t.Fatal(err)
		}
		secret.Data = map[string][]byte{"ca.crt": []byte("ca"), "ca.key": []byte("cakey"), CertFile: []byte(s.crt), KeyFile: []byte(s.key)}
		if err := c.Update(ctx, secret); err != nil {
			t.Fatal(err)
		}
		changed, err := f.sync(ctx)
		if err != nil {
			t.Fatalf("%s: sync: %v", s.name, err)
		}
		if changed != s.wantChanged {
			t.Errorf("%s: changed = %v, want %v", s.name, changed, s.wantChanged)
		}
		want := map[string]string{CertFile: s.crt, KeyFile: s.key}
		if diff := cmp.Diff(want, readFiles(t, dir)); diff != "" {
			t.Errorf("%s: files in cert dir (-want +got):\n%s", s.name, diff)
		}
		for _, name := range []string{CertFile, KeyFile} {
			fi, err := os.Stat(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != 0o600 {
				t.Errorf("%s: %s mode %v, want 0600 (it holds a private key)", s.name, name, fi.Mode().Perm())
			}
		}
	}
}

func TestFileSyncMissingSecret(t *testing.T) {
	t.Parallel()
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).Build()
	f := &fileSync{reader: c, key: types.NamespacedName{Namespace: "ns", Name: "missing"}, dir: t.TempDir(), log: logr.Discard()}
	_, err := f.sync(context.Background())
	if err == nil || !strings.Contains(err.Error(), "ns/missing") {
		t.Errorf("sync with no secret: %v, want an error naming ns/missing", err)
	}
}
