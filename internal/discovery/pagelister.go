package discovery

import (
	"bytes"
	"context"
	"io"
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
)

// PageLister reads one LIST page of a resource's metadata, all namespaces,
// as the response body, into buf (reset first): what the metadata client's
// List fetches, without decoding it (see decodePage).
type PageLister interface {
	ListPage(ctx context.Context, gvr schema.GroupVersionResource, opts metav1.ListOptions, buf *bytes.Buffer) error
}

// StreamLister opens a streaming list of a resource's metadata, all
// namespaces: a WATCH with sendInitialEvents (kube-apiserver's WatchList,
// on by default since 1.34) whose body is read by watchDecoder. A
// PageLister that is also a StreamLister makes the monitors list by
// streaming first (see monitor.streamList).
type StreamLister interface {
	WatchList(ctx context.Context, gvr schema.GroupVersionResource, opts metav1.ListOptions) (io.ReadCloser, error)
}

// PagesOnly returns pl without its StreamLister, if any: monitors list by
// pages only.
func PagesOnly(pl PageLister) PageLister {
	return struct{ PageLister }{pl}
}

// RESTPageLister is a PageLister and a StreamLister over a REST client configured as the
// metadata client is (metadata.ConfigFor: its rate limiter, and the
// serializer that decodes error Statuses, so that a 404 is an
// apierrors.IsNotFound error as from the metadata client).
type RESTPageLister struct {
	Client rest.Interface
}

// NewRESTPageLister returns a PageLister for cfg using httpClient (which
// may be shared with kgc's other clients).
func NewRESTPageLister(cfg *rest.Config, httpClient *http.Client) (*RESTPageLister, error) {
	c, err := rest.UnversionedRESTClientForConfigAndClient(metadata.ConfigFor(cfg), httpClient)
	if err != nil {
		return nil, err
	}
	return &RESTPageLister{Client: c}, nil
}

// listAccept asks for the page as the metadata client does, protobuf first.
const listAccept = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"

// ListPage implements PageLister.
func (l *RESTPageLister) ListPage(ctx context.Context, gvr schema.GroupVersionResource, opts metav1.ListOptions, buf *bytes.Buffer) error {
	body, err := l.Client.Get().AbsPath(resourcePath(gvr)...).
		SetHeader("Accept", listAccept).
		SpecificallyVersionedParams(&opts, metav1.ParameterCodec, metav1.SchemeGroupVersion).
		Stream(ctx)
	if err != nil {
		return err
	}
	defer body.Close()
	buf.Reset()
	_, err = buf.ReadFrom(body)
	return err
}

// watchAccept asks for watch events as the metadata client does, protobuf
// first.
const watchAccept = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"

// WatchList implements StreamLister: it opens the watch opts describe
// and returns its body. It does not retry: an answer kube-apiserver gives
// while the resource's watch cache initializes (429 with Retry-After,
// which the REST client would retry for up to ten seconds) is returned at
// once, and the monitor lists by pages instead (see monitor.streamList).
func (l *RESTPageLister) WatchList(ctx context.Context, gvr schema.GroupVersionResource, opts metav1.ListOptions) (io.ReadCloser, error) {
	return l.Client.Get().AbsPath(resourcePath(gvr)...).
		SetHeader("Accept", watchAccept).
		SpecificallyVersionedParams(&opts, metav1.ParameterCodec, metav1.SchemeGroupVersion).
		MaxRetries(0).
		Stream(ctx)
}

// resourcePath is the path of a resource across all namespaces.
func resourcePath(gvr schema.GroupVersionResource) []string {
	if gvr.Group == "" {
		return []string{"/api", gvr.Version, gvr.Resource}
	}
	return []string{"/apis", gvr.Group, gvr.Version, gvr.Resource}
}
