package namespaces

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
)

// The condition types kube-controller-manager's namespace controller sets on
// a deleting Namespace, in the order it lists them. Each is True while its
// problem lasts and False (with a fixed "all good" reason and message)
// otherwise; every pass sets all five.
var conditionTypes = []corev1.NamespaceConditionType{
	corev1.NamespaceDeletionDiscoveryFailure,
	corev1.NamespaceDeletionGVParsingFailure,
	corev1.NamespaceDeletionContentFailure,
	corev1.NamespaceContentRemaining,
	corev1.NamespaceFinalizersRemaining,
}

// Reasons and messages of the False ("nothing wrong") conditions: the
// strings kube-controller-manager v1.36 writes, so that tools reading them
// see the same thing.
var okConditions = map[corev1.NamespaceConditionType][2]string{
	corev1.NamespaceDeletionDiscoveryFailure: {"ResourcesDiscovered", "All resources successfully discovered"},
	corev1.NamespaceDeletionGVParsingFailure: {"ParsedGroupVersions", "All legacy kube types successfully parsed"},
	corev1.NamespaceDeletionContentFailure:   {"ContentDeleted", "All content successfully deleted, may be waiting on finalization"},
	corev1.NamespaceContentRemaining:         {"ContentRemoved", "All content successfully removed"},
	corev1.NamespaceFinalizersRemaining:      {"ContentHasNoFinalizers", "All content-preserving finalizers finished"},
}

// report is what one pass over a namespace found: everything the
// conditions say, and everything that decides whether the finalizer may go.
type report struct {
	// discoveryErr: discovery failed, entirely or for some groups (whose
	// resources were then not emptied).
	discoveryErr error
	// parseErr: a discovered group version did not parse.
	parseErr error
	// contentErrs: a resource's DELETECOLLECTION, DELETE or LIST failed,
	// or objects without finalizers remained after their deletion.
	contentErrs []error
	// remaining counts the objects a quorum LIST still found, per resource.
	remaining map[schema.GroupVersionResource]int
	// finalizers counts the remaining objects carrying each finalizer.
	finalizers map[string]int
}

func newReport() *report {
	return &report{remaining: map[schema.GroupVersionResource]int{}, finalizers: map[string]int{}}
}

// err is every failure of the pass, or nil.
func (r *report) err() error {
	errs := append([]error{r.discoveryErr, r.parseErr}, r.contentErrs...)
	return errors.Join(errs...)
}

// remainingTotal is the number of objects found left.
func (r *report) remainingTotal() int {
	n := 0
	for _, c := range r.remaining {
		n += c
	}
	return n
}

// conditions returns the five conditions r calls for, in conditionTypes'
// order, with the reasons and the shape of messages of
// kube-controller-manager v1.36 (LastTransitionTime is left to
// setConditions).
func (r *report) conditions() []corev1.NamespaceCondition {
	out := make([]corev1.NamespaceCondition, 0, len(conditionTypes))
	for _, t := range conditionTypes {
		ok := okConditions[t]
		c := corev1.NamespaceCondition{Type: t, Status: corev1.ConditionFalse, Reason: ok[0], Message: ok[1]}
		switch t {
		case corev1.NamespaceDeletionDiscoveryFailure:
			if r.discoveryErr != nil {
				c.Status, c.Reason, c.Message = corev1.ConditionTrue, "DiscoveryFailed", discoveryMessage(r.discoveryErr)
			}
		case corev1.NamespaceDeletionGVParsingFailure:
			if r.parseErr != nil {
				c.Status, c.Reason, c.Message = corev1.ConditionTrue, "GroupVersionParsingFailed", r.parseErr.Error()
			}
		case corev1.NamespaceDeletionContentFailure:
			if len(r.contentErrs) > 0 {
				msgs := make([]string, 0, len(r.contentErrs))
				for _, e := range r.contentErrs {
					msgs = append(msgs, e.Error())
				}
				slices.Sort(msgs)
				c.Status, c.Reason = corev1.ConditionTrue, "ContentDeletionFailed"
				c.Message = fmt.Sprintf("Failed to delete all resource types, %d remaining: %v", len(msgs), strings.Join(msgs, ", "))
			}
		case corev1.NamespaceContentRemaining:
			var parts []string
			for gvr, n := range r.remaining {
				if n > 0 {
					parts = append(parts, fmt.Sprintf("%s.%s has %d resource instances", gvr.Resource, gvr.Group, n))
				}
			}
			if len(parts) > 0 {
				slices.Sort(parts)
				c.Status, c.Reason = corev1.ConditionTrue, "SomeResourcesRemain"
				c.Message = "Some resources are remaining: " + strings.Join(parts, ", ")
			}
		case corev1.NamespaceFinalizersRemaining:
			var parts []string
			for f, n := range r.finalizers {
				if n > 0 {
					parts = append(parts, fmt.Sprintf("%s in %d resource instances", f, n))
				}
			}
			if len(parts) > 0 {
				slices.Sort(parts)
				c.Status, c.Reason = corev1.ConditionTrue, "SomeFinalizersRemain"
				c.Message = "Some content in the namespace has finalizers remaining: " + strings.Join(parts, ", ")
			}
		}
		out = append(out, c)
	}
	return out
}

// discoveryMessage is the DiscoveryFailure message: for a partial failure
// it counts the failing groups first, as kube-controller-manager does.
func discoveryMessage(err error) string {
	var gdf *discovery.ErrGroupDiscoveryFailed
	if errors.As(err, &gdf) {
		return fmt.Sprintf("Discovery failed for some groups, %d failing: %v", len(gdf.Groups), err)
	}
	return err.Error()
}

// setConditions merges want into status: a condition whose status, reason
// or message differs is replaced (its LastTransitionTime moves to now only
// when its status flips), a missing one is added. Conditions of other types
// are kept. It reports whether anything changed, i.e. whether a status
// write is needed.
func setConditions(status *corev1.NamespaceStatus, want []corev1.NamespaceCondition, now metav1.Time) bool {
	changed := false
	for _, w := range want {
		i := slices.IndexFunc(status.Conditions, func(c corev1.NamespaceCondition) bool { return c.Type == w.Type })
		if i < 0 {
			w.LastTransitionTime = now
			status.Conditions = append(status.Conditions, w)
			changed = true
			continue
		}
		old := &status.Conditions[i]
		if old.Status == w.Status && old.Reason == w.Reason && old.Message == w.Message {
			continue
		}
		if old.Status != w.Status {
			old.LastTransitionTime = now
		}
		old.Status, old.Reason, old.Message = w.Status, w.Reason, w.Message
		changed = true
	}
	return changed
}
