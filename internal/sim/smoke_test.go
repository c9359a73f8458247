package sim

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestSmokeBackground(t *testing.T) {
	s := New(1)
	o, err := s.Create(Deployments, "a", "o", nil)
	if err != nil {
		t.Fatal(err)
	}
	d, err := s.Create(ReplicaSets, "a", "d", nil, s.OwnerRef(o, true))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	if err := s.Settle(); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(o, metav1.DeletePropagationBackground); err != nil {
		t.Fatal(err)
	}
	if err := s.Quiesce(10 * time.Minute); err != nil {
		t.Fatal(err)
	}
	if s.Get(d) != nil {
		t.Errorf("dependent survives\n%s", s.Trace())
	}
	if v := s.Violations(); len(v) > 0 {
		t.Errorf("violations %v", v)
	}
}
