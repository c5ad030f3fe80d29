package dra

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	resourcev1 "k8s.io/client-go/kubernetes/typed/resource/v1"

	"github.com/ibkube/ibkube/node/dra/holds"
)

// ClaimsGetter is the part of the resource.k8s.io/v1 client the CDI
// reconcile reads claims through (resourcev1.ResourceV1Interface).
type ClaimsGetter interface {
	ResourceClaims(namespace string) resourcev1.ResourceClaimInterface
}

// The stale-spec reconcile reads one claim per spec, up to 504 on a node of
// 8 HCAs with 63 sharers each. It paces those reads on its own token bucket
// (DefaultReconcileQPS, DefaultReconcileBurst), and the agent gives it its
// own client: on the agent's client (client-go's default 5 QPS) a round
// would queue Prepare's claim reads and the slice and taint writes behind
// it for ~100 s. At 5 QPS a round of 504 takes ~100 s, inside the period.
const (
	DefaultReconcileQPS   = 5
	DefaultReconcileBurst = 10
)

// RateLimiter paces the reconcile's claim reads
// (flowcontrol.RateLimiter's Wait).
type RateLimiter interface {
	Wait(ctx context.Context) error
}

// DefaultReconcilePeriod is how often the driver looks for CDI specs whose
// claims are gone, besides at start.
const DefaultReconcilePeriod = 5 * time.Minute

// ReasonStaleCDISpec is the reason of the node's Event for a CDI spec
// removed because its claim is gone.
const ReasonStaleCDISpec = "StaleCDISpecRemoved"

// A CDI spec outlives its claim when the agent is killed between Prepare's
// write and Unprepare, or a claim is deleted while the agent is down: the
// kubelet then never asks to unprepare it. Such a spec holds its HCAs for
// ever (Prepare refuses them to anyone else), so the driver removes specs
// whose claim the API server no longer has, or has with another UID or no
// allocation.

// staleReason says why the spec of claim uid, recorded as ref
// ("namespace/name"), is stale, or "" when it is not (or cannot be told:
// an API error keeps the spec).
func staleReason(ctx context.Context, claims ClaimsGetter, uid types.UID, ref string) (string, error) {
	ns, name, ok := strings.Cut(ref, "/")
	if !ok || ns == "" || name == "" {
		return "", fmt.Errorf("the spec names no claim (annotation %s is %q)", annotationClaim, ref)
	}
	c, err := claims.ResourceClaims(ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Sprintf("claim %s no longer exists", ref), nil
	case err != nil:
		return "", fmt.Errorf("get claim %s: %w", ref, err)
	case c.UID != uid:
		return fmt.Sprintf("claim %s is now another object (UID %s)", ref, c.UID), nil
	case c.Status.Allocation == nil:
		return fmt.Sprintf("claim %s is no longer allocated", ref), nil
	}
	return "", nil
}

// ReconcileCDI removes the CDI specs of this driver whose claims are gone,
// counts and logs each and sends a node Event; it returns how many it
// removed. Without a claims client it does nothing.
func (d *Driver) ReconcileCDI(ctx context.Context) (int, error) {
	if d.cfg.Claims == nil {
		return 0, nil
	}
	entries, err := os.ReadDir(d.cfg.CDIDir)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("list CDI specs: %w", err)
	}
	removed := 0
	var errs []error
	for _, e := range entries {
		uid, ok := holds.UIDOf(e.Name())
		if !ok {
			continue
		}
		spec, err := d.store.read(uid)
		if err != nil || spec == nil {
			continue // gone meanwhile, or unreadable: Prepare reports it
		}
		if err := d.cfg.ReconcileLimiter.Wait(ctx); err != nil {
			return removed, errors.Join(append(errs, fmt.Errorf("reconcile CDI specs: %w", err))...)
		}
		ref := spec.Annotations[annotationClaim]
		why, err := staleReason(ctx, d.cfg.Claims, uid, ref)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if why == "" {
			continue
		}
		if err := d.store.remove(uid); err != nil {
			errs = append(errs, err)
			continue
		}
		removed++
		d.metrics.staleSpecs.Inc()
		d.log.Info("removed a stale CDI spec", "claim", ref, "uid", uid, "reason", why)
		d.nodeEvent(ReasonStaleCDISpec, fmt.Sprintf("removed the CDI spec of claim %s (UID %s): %s; its HCAs are free again", ref, uid, why))
	}
	return removed, errors.Join(errs...)
}

// reconcileLoop runs ReconcileCDI every period until ctx ends.
func (d *Driver) reconcileLoop(ctx context.Context, period time.Duration) {
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if _, err := d.ReconcileCDI(ctx); err != nil {
				d.log.Error(err, "reconcile CDI specs with their claims")
			}
		}
	}
}
