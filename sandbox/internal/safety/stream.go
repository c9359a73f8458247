package safety

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"
)

// EventType says what a watch reported.
type EventType int

const (
	Added EventType = iota
	Updated
	Deleted
)

// Event is one change of a watched object.
type Event struct {
	Type     EventType
	Resource schema.GroupVersionResource
	Object   *metav1.PartialObjectMetadata
	// FinalStateUnknown: a deletion the watch missed and a relist found;
	// Object is the last state seen before it, not the final one.
	FinalStateUnknown bool
}

// StreamOptions says what a Stream watches.
type StreamOptions struct {
	Resources []schema.GroupVersionResource
	// Selector is a label selector; only the objects it matches are
	// watched.
	Selector string
	// MarkerLabel marks Sync's marker objects; their events go to Sync,
	// not to the callback.
	MarkerLabel string
}

// Stream watches objects and hands their events to one callback.
type Stream struct {
	opts    StreamOptions
	handle  func(Event)
	mu      sync.Mutex
	markers map[string]chan struct{} // marker token → closed once seen
}

// Watch starts a Stream and returns once its informers have synced (or
// failed to within 30s). handle is called from the informers' goroutines,
// one per resource, in order for each resource. The Stream stops, and its
// informers' goroutines end, once ctx is done.
func Watch(ctx context.Context, client metadata.Interface, opts StreamOptions, handle func(Event)) (*Stream, error) {
	s := &Stream{opts: opts, handle: handle, markers: map[string]chan struct{}{}}
	factory := metadatainformer.NewFilteredSharedInformerFactory(client, 0, metav1.NamespaceAll,
		func(o *metav1.ListOptions) { o.LabelSelector = opts.Selector })
	for _, gvr := range opts.Resources {
		_, err := factory.ForResource(gvr).Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { s.observe(Added, gvr, o) },
			UpdateFunc: func(_, o any) { s.observe(Updated, gvr, o) },
			DeleteFunc: func(o any) { s.observe(Deleted, gvr, o) },
		})
		if err != nil {
			return nil, err
		}
	}
	factory.Start(ctx.Done())
	go func() {
		<-ctx.Done()
		factory.Shutdown()
	}()
	syncCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for gvr, ok := range factory.WaitForCacheSync(syncCtx.Done()) {
		if !ok {
			return nil, fmt.Errorf("informer for %s did not sync", gvr)
		}
	}
	return s, nil
}

func (s *Stream) observe(typ EventType, gvr schema.GroupVersionResource, o any) {
	ev := Event{Type: typ, Resource: gvr}
	if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o, ev.FinalStateUnknown = d.Obj, true
	}
	m, ok := o.(*metav1.PartialObjectMetadata)
	if !ok {
		return
	}
	if token := m.Labels[s.opts.MarkerLabel]; token != "" {
		if typ != Deleted {
			s.mu.Lock()
			if ch, ok := s.markers[token]; ok {
				close(ch)
				delete(s.markers, token)
			}
			s.mu.Unlock()
		}
		return
	}
	ev.Object = m
	s.handle(ev)
}

// MarkerFunc creates an object of resource gvr that the Stream watches
// (it carries the Stream's selector) and that is labelled MarkerLabel=token.
type MarkerFunc func(ctx context.Context, gvr schema.GroupVersionResource, token string) error

// Sync returns once the callback has seen every change made before Sync
// was called: it creates one marker per watched resource with create and
// waits, at most timeout, for each to come back through its watch. The
// watches of different resources are not ordered relative to each other,
// hence one marker each.
func (s *Stream) Sync(ctx context.Context, timeout time.Duration, create MarkerFunc) error {
	base := utilrand.String(10)
	var errs []error
	var pending []chan struct{}
	for _, gvr := range s.opts.Resources {
		token := gvr.Resource + "-" + base
		ch := make(chan struct{})
		s.mu.Lock()
		s.markers[token] = ch
		s.mu.Unlock()
		if err := create(ctx, gvr, token); err != nil {
			errs = append(errs, fmt.Errorf("creating the %s marker: %w", gvr.Resource, err))
			continue
		}
		pending = append(pending, ch)
	}
	deadline := time.After(timeout)
	for _, ch := range pending {
		select {
		case <-ch:
		case <-deadline:
			return errors.Join(append(errs, fmt.Errorf("the watches did not return their markers within %s; changes may have been missed", timeout))...)
		case <-ctx.Done():
			return errors.Join(append(errs, ctx.Err())...)
		}
	}
	return errors.Join(errs...)
}
