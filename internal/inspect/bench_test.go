package inspect

import (
	"context"
	"fmt"
	"testing"

	"github.com/kgc-dev/kgc/internal/rules"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BenchmarkPreviewDelete: a Foreground preview of a deployment with 100
// replica sets of 20 pods each (2,101 objects), read from the fake client.
func BenchmarkPreviewDelete(b *testing.B) {
	c := newCluster(b)
	d := c.add(deployR, "a", "d")
	for i := range 100 {
		rs := c.add(rsR, "a", fmt.Sprintf("rs-%d", i), owned(d, true))
		for j := range 20 {
			c.add(podR, "a", fmt.Sprintf("p-%d-%d", i, j), owned(rs, true))
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		p, err := PreviewDelete(context.Background(), rules.Policy{}, c.view(), d, metav1.DeletePropagationForeground)
		if err != nil || len(p.Deleted) != 2101 {
			b.Fatalf("%v, %d deleted", err, len(p.Deleted))
		}
	}
}
