package model

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The reference model and the judge are test code that could be wrong in
// the lenient direction; these checks pin their rules on small cases.

func TestSimulateRules(t *testing.T) {
	obj := func(uid string, idx int, refs ...simRef) *simObj {
		return &simObj{uid: types.UID(uid), idx: idx, refs: refs}
	}
	r := func(uid string, block bool) simRef { return simRef{uid: types.UID(uid), block: block} }
	cases := []struct {
		name  string
		objs  []*simObj
		setup func(m map[types.UID]*simObj)
		want  map[string]string // survivor → its references
	}{
		{
			name: "background: sole dependent collected, co-owned one keeps its live owner",
			objs: []*simObj{obj("a", 0), obj("d", 1), obj("b", 2, r("a", false)), obj("c", 3, r("a", true), r("d", false))},
			setup: func(m map[types.UID]*simObj) {
				m["a"].gone = true
			},
			want: map[string]string{"d": "", "c": "d:false"},
		},
		{
			name: "orphan: dependents keep living without the reference",
			objs: []*simObj{obj("a", 0), obj("b", 1, r("a", true)), obj("c", 2, r("b", false))},
			setup: func(m map[types.UID]*simObj) {
				m["a"].deleting, m["a"].finalizers = true, []string{finalizerOrphan}
			},
			want: map[string]string{"b": "", "c": "b:false"},
		},
		{
			name: "foreground: the whole chain goes, a dependent with another owner stays",
			objs: []*simObj{obj("a", 0), obj("x", 1), obj("b", 2, r("a", true)), obj("c", 3, r("b", true)), obj("e", 4, r("b", true), r("x", true))},
			setup: func(m map[types.UID]*simObj) {
				m["a"].deleting, m["a"].finalizers = true, []string{finalizerForeground}
			},
			want: map[string]string{"x": "", "e": "x:true"},
		},
		{
			name: "a held dependent is being deleted, not gone; its foreground owner waits",
			objs: []*simObj{obj("a", 0), obj("b", 1, r("a", true))},
			setup: func(m map[types.UID]*simObj) {
				m["a"].deleting, m["a"].finalizers = true, []string{finalizerForeground}
				m["b"].finalizers = []string{holdFinalizer}
			},
			want: map[string]string{"a": "", "b": "a:true"},
		},
		{
			name: "an object without references is never garbage",
			objs: []*simObj{obj("a", 0)},
			want: map[string]string{"a": ""},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := map[types.UID]*simObj{}
			for _, o := range c.objs {
				m[o.uid] = o
			}
			if c.setup != nil {
				c.setup(m)
			}
			simulate(m)
			got := map[string]string{}
			for uid, o := range m {
				if !o.gone {
					got[string(uid)] = refsKey(o.refs)
				}
			}
			if len(got) != len(c.want) {
				t.Fatalf("survivors %v, want %v", got, c.want)
			}
			for k, v := range c.want {
				if g, ok := got[k]; !ok || g != v {
					t.Fatalf("survivors %v, want %v", got, c.want)
				}
			}
		})
	}
}

func TestJudgeRules(t *testing.T) {
	block := true
	refTo := func(uid string) []metav1.OwnerReference {
		return []metav1.OwnerReference{{Kind: "ConfigMap", Name: uid, UID: types.UID(uid), BlockOwnerDeletion: &block}}
	}
	hist := func(uid string, states ...objState) *history {
		return &history{id: ident{kind: configMapKind, namespace: "ns", name: uid, uid: types.UID(uid)}, run: "r", states: states}
	}
	w := &safetyWatcher{objects: map[types.UID]*history{
		// Owner o lives throughout; d is deleted at rv 5: a violation.
		"o": hist("o", objState{rv: 1}),
		"d": hist("d", objState{rv: 2, refs: refTo("o")}, objState{rv: 5, gone: true, refs: refTo("o")}),
		// Owner p starts deleting at rv 6, e's deletion starts at rv 7: fine.
		"p": hist("p", objState{rv: 3}, objState{rv: 6, deleting: true}),
		"e": hist("e", objState{rv: 4, refs: refTo("p")}, objState{rv: 7, deleting: true, refs: refTo("p")}, objState{rv: 9, gone: true, refs: refTo("p")}),
		// Owner q is gone at rv 10; f goes at rv 11: fine. g goes at rv 8,
		// before q started deleting: a violation.
		"q": hist("q", objState{rv: 3}, objState{rv: 10, gone: true}),
		"f": hist("f", objState{rv: 4, refs: refTo("q")}, objState{rv: 11, gone: true, refs: refTo("q")}),
		"g": hist("g", objState{rv: 4, refs: refTo("q")}, objState{rv: 8, gone: true, refs: refTo("q")}),
		// h is deleted by the test: not judged.
		"h": hist("h", objState{rv: 4, refs: refTo("o")}, objState{rv: 12, gone: true, refs: refTo("o")}),
	}, unknowns: map[string]int{}}
	violations, judged, _ := w.judge("r", map[types.UID]bool{"h": true})
	if judged != 7 { // d, e (start and removal), f, g, and the owners p and q
		t.Errorf("judged %d deletion events, want 7", judged)
	}
	if len(violations) != 2 || !strings.Contains(violations[0], "ns/d") || !strings.Contains(violations[1], "ns/g") {
		t.Errorf("violations:\n%s\nwant exactly d's and g's", strings.Join(violations, "\n"))
	}
}
