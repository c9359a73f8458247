package controlplane

import (
	"testing"

	"github.com/kgc-dev/kgc/sandbox/internal/cpproc"
)

// TestCPProcDefaults checks the copies package cpproc keeps of the
// defaults, for its callers that cannot import this package.
func TestCPProcDefaults(t *testing.T) {
	if cpproc.DefaultControllers != DefaultControllers {
		t.Errorf("cpproc.DefaultControllers = %q, want %q", cpproc.DefaultControllers, DefaultControllers)
	}
	if cpproc.DefaultNodes != DefaultNodes {
		t.Errorf("cpproc.DefaultNodes = %d, want %d", cpproc.DefaultNodes, DefaultNodes)
	}
}
