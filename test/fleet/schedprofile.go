//go:build fleet

package fleet

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// schedulerSecurePort is kube-scheduler's default --secure-port; fleet.sh
// binds it to the API server's address when FLEET_PROFILE is set.
const schedulerSecurePort = "10259"

// schedulerProfileURL is the scheduler's CPU profile endpoint on the API
// server's host, over window.
func schedulerProfileURL(apiHost string, window time.Duration) (string, error) {
	u, err := url.Parse(apiHost)
	if err != nil || u.Hostname() == "" {
		return "", fmt.Errorf("API server address %q: want a URL such as https://198.18.16.10:6443", apiHost)
	}
	u.Scheme, u.Host, u.Path = "https", net.JoinHostPort(u.Hostname(), schedulerSecurePort), "/debug/pprof/profile"
	u.RawQuery = url.Values{"seconds": {strconv.Itoa(int(window.Seconds()))}}.Encode()
	return u.String(), nil
}

// profileScheduler, with FLEET_PROFILE=1, records a CPU profile of
// kube-scheduler over profileWindow into profiles/scheduler-NAME.pprof
// (go tool pprof _output/bin/k8s/kube-scheduler FILE). The scheduler
// authenticates the admin's client certificate and authorizes it through
// the API server (its delegated authn/authz); its serving certificate is
// self-signed, so it is not verified. The function it returns waits for
// the profile and returns its path relative to the run's directory ("" if
// none was taken).
func (f *fleet) profileScheduler(t *testing.T, name string) (wait func() string) {
	if !f.s.profile {
		return func() string { return "" }
	}
	done := make(chan string, 1)
	go func() {
		rel := filepath.Join("profiles", "scheduler-"+name+".pprof")
		if err := f.fetchSchedulerProfile(filepath.Join(f.s.dir, rel)); err != nil {
			t.Errorf("profile the scheduler during %s: %v (FLEET_PROFILE needs the scheduler's profiling on: fleet.sh up with FLEET_PROFILE set)", name, err)
			rel = ""
		} else {
			t.Logf("kube-scheduler CPU profile over the first %v of burst %s: %s", profileWindow, name, rel)
		}
		done <- rel
	}()
	return func() string { return <-done }
}

func (f *fleet) fetchSchedulerProfile(path string) error {
	u, err := schedulerProfileURL(f.rest.Host, profileWindow)
	if err != nil {
		return err
	}
	cfg := rest.CopyConfig(f.rest)
	cfg.TLSClientConfig.Insecure, cfg.TLSClientConfig.CAData, cfg.TLSClientConfig.CAFile = true, nil, ""
	cfg.Timeout = profileWindow + time.Minute
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(f.ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %.200s", u, resp.Status, b)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}
