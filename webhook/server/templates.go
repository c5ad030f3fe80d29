package server

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/ibkube/ibkube/webhook/handler"
	"github.com/ibkube/ibkube/webhook/templates"
)

// liveClient reads through the API server, not the cache, so listing the
// templates starts no informer: a cluster with alignedClaims off, or
// without resource.k8s.io, watches nothing for them.
type liveClient struct {
	client.Reader
	client.Writer
}

// templateRunner runs the aligned claim templates' controller, each pass
// reading the config the webhook admits with, woken by changes of the
// namespaces (the handler's namespace cache) and of the config.
type templateRunner struct {
	mgr   manager.Manager
	store *configStore
	log   logr.Logger
}

func (r templateRunner) Start(ctx context.Context) error {
	changes := make(chan struct{}, 1)
	poke := func() {
		select {
		case changes <- struct{}{}:
		default:
		}
	}
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-r.store.Changed():
				poke()
			}
		}
	}()
	ns := &metav1.PartialObjectMetadata{}
	ns.SetGroupVersionKind(handler.NamespaceGVK)
	inf, err := r.mgr.GetCache().GetInformer(ctx, ns)
	if err != nil {
		return fmt.Errorf("namespace informer: %w", err)
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { poke() },
		UpdateFunc: func(any, any) { poke() },
		DeleteFunc: func(any) { poke() },
	}); err != nil {
		return fmt.Errorf("namespace events: %w", err)
	}
	c := &templates.Controller{
		Namespaces: r.mgr.GetClient(),
		Templates:  liveClient{Reader: r.mgr.GetAPIReader(), Writer: r.mgr.GetClient()},
		Config:     r.store.Current,
		Log:        r.log,
	}
	return c.Run(ctx, changes)
}

// NeedLeaderElection is false: every replica runs it, and its writes agree.
func (templateRunner) NeedLeaderElection() bool { return false }
