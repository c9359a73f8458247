package discovery

import (
	"bytes"
	"context"
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

// RESTPageLister is a PageLister over a REST client configured as the
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
	path := []string{"/api", gvr.Version, gvr.Resource}
	if gvr.Group != "" {
		path = []string{"/apis", gvr.Group, gvr.Version, gvr.Resource}
	}
	body, err := l.Client.Get().AbsPath(path...).
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
