package discovery

import (
	"context"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"

	"github.com/kgc-dev/kgc/internal/collector"
	"github.com/kgc-dev/kgc/sandbox/internal/faultproxy"
	"github.com/kgc-dev/kgc/sandbox/internal/testenv"
)

// setCRDVersions replaces the CRD's versions (the first is the storage
// version; all are served).
func setCRDVersions(t *testing.T, s crdSpec, versions ...string) {
	t.Helper()
	want := testenv.CRD(s.group, s.plural, s.kind, true, versions...)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		u, err := dynamicClient.Resource(crdGVR).Get(context.Background(), s.name(), metav1.GetOptions{})
		if err != nil {
			return err
		}
		u.Object["spec"].(map[string]any)["versions"] = want.Object["spec"].(map[string]any)["versions"]
		_, err = dynamicClient.Resource(crdGVR).Update(context.Background(), u, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("set versions %v of CRD %s: %v", versions, s.name(), err)
	}
}

// monitoring reports whether c monitors exactly version of s's resource
// (synced) and no other version of it.
func monitoring(c *collector.Collector, s crdSpec, version string, others ...string) bool {
	st := c.MonitorStatus()
	if !st[s.gvr(version)].Synced {
		return false
	}
	for _, v := range others {
		if _, ok := st[s.gvr(v)]; ok {
			return false
		}
	}
	return true
}

// observedAt returns the apiVersion kgc's graph records the object at ("" if
// not observed).
func observedAt(c *collector.Collector, o metav1.Object) string {
	obj, ok := c.Graph().Object(o.GetUID())
	if !ok {
		return ""
	}
	return obj.Identity.APIVersion
}

func deleteCustomResource(t *testing.T, s crdSpec, version, ns, name string) {
	t.Helper()
	err := dynamicClient.Resource(s.gvr(version)).Namespace(ns).Delete(context.Background(), name, metav1.DeleteOptions{})
	if err != nil {
		t.Fatalf("delete %s %s/%s: %v", s.kind, ns, name, err)
	}
}

// A CRD's preferred version changes from v1 to v2 while kgc watches: the
// v1 monitor stops, the v2 monitor lists. kgc's graph must then hold the
// unchanged instances at v2 (before, an instance relisted at the same
// resourceVersion kept v1, and a later relist by the v2 monitor would
// never sweep it: deleted during a watch expiry, it stayed a solid owner
// forever). An owner deleted during the switch and one deleted after it
// both release their ConfigMaps; a ConfigMap of a live instance stays.
func TestPreferredVersionSwitchLeavesNoGhost(t *testing.T) {
	c, _ := startCollector(t, 5*time.Minute)
	ns := newNamespace(t)
	s := newCRDSpec("switch.kgc.test", "v1")
	createCRD(t, s)
	poll(t, "CRD to be established", func() bool { return crdEstablished(s.name()) })
	ownerRef := func(o metav1.Object) []metav1.OwnerReference {
		return []metav1.OwnerReference{refTo(o, s.group+"/v1", s.kind, false)}
	}
	live := customResource(t, s, "v1", ns, "live", nil)
	during := customResource(t, s, "v1", ns, "during", nil)
	after := customResource(t, s, "v1", ns, "after", nil)
	deps := map[string]*corev1.ConfigMap{}
	for _, o := range []metav1.Object{live, during, after} {
		deps[o.GetName()] = configMap(t, ns, "dep-"+o.GetName(), ownerRef(o))
	}
	poll(t, "kgc to monitor v1", func() bool { return monitoring(c, s, "v1") })
	poll(t, "the instances and their dependents observed", func() bool {
		for _, o := range []metav1.Object{live, during, after, deps["live"], deps["during"], deps["after"]} {
			if _, ok := c.Graph().Object(o.GetUID()); !ok {
				return false
			}
		}
		return true
	})

	// v2 becomes the storage and preferred version; "during" goes while
	// kgc switches monitors.
	setCRDVersions(t, s, "v2", "v1")
	deleteCustomResource(t, s, "v1", ns, "during")
	poll(t, "kgc to monitor v2 instead of v1", func() bool { return monitoring(c, s, "v2", "v1") })
	poll(t, "the unchanged instances recorded at v2", func() bool {
		return observedAt(c, live) == s.group+"/v2" && observedAt(c, after) == s.group+"/v2"
	})
	poll(t, "the dependent of the owner deleted during the switch to be collected", func() bool { return configMapGone(ns, "dep-during") })

	deleteCustomResource(t, s, "v2", ns, "after")
	poll(t, "the dependent of the owner deleted after the switch to be collected", func() bool { return configMapGone(ns, "dep-after") })
	if configMapGone(ns, "dep-live") {
		t.Fatal("the dependent of a live instance was deleted")
	}
	// Settle: nothing else goes.
	time.Sleep(time.Second)
	if configMapGone(ns, "dep-live") {
		t.Fatal("the dependent of a live instance was deleted")
	}
	if err := c.Graph().CheckInvariants(); err != nil {
		t.Error(err)
	}
}

// A CRD with instances owning ConfigMaps is deleted while kgc watches: the
// apiserver deletes the instances, then the CRD; for a while it may keep
// the resource in discovery while its LIST answers 404. kgc must collect
// the ConfigMaps whose only owner was an instance (whether or not the
// instances' delete events reached it before its monitor stopped), keep a
// ConfigMap that also has a live owner, not report the resource failing,
// leave no node of the kind in its graph, and monitor the CRD again when
// it is created again under the same name (new instances, new UIDs).
func TestDeletedCRDReleasesItsInstancesDependents(t *testing.T) {
	c, _ := startCollector(t, 5*time.Minute)
	ns := newNamespace(t)
	s := newCRDSpec("gone.kgc.test", "v1")
	createCRD(t, s)
	poll(t, "CRD to be established", func() bool { return crdEstablished(s.name()) })
	liveOwner := configMap(t, ns, "live-owner", nil)
	const n = 20
	var instances []metav1.Object
	for i := range n {
		instances = append(instances, customResource(t, s, "v1", ns, "w"+string(rune('a'+i)), nil))
	}
	for _, o := range instances {
		configMap(t, ns, "dep-"+o.GetName(), []metav1.OwnerReference{refTo(o, s.group+"/v1", s.kind, false)})
	}
	both := configMap(t, ns, "both", []metav1.OwnerReference{refTo(instances[0], s.group+"/v1", s.kind, false), cmRef(liveOwner, false)})
	poll(t, "kgc to monitor the CRD", func() bool { return monitoring(c, s, "v1") })
	poll(t, "the dependents observed", func() bool { _, ok := c.Graph().Object(both.UID); return ok })

	deleteCRDAndWait(t, s.name())
	// Watch the monitor while the resource goes: never failing.
	stop := make(chan struct{})
	failing := make(chan string, 1)
	go func() {
		_ = wait.PollUntilContextCancel(context.Background(), 20*time.Millisecond, true, func(context.Context) (bool, error) {
			select {
			case <-stop:
				return true, nil
			default:
			}
			if st, ok := c.MonitorStatus()[s.gvr("v1")]; ok && st.Failing() {
				failing <- st.LastError.Error()
				return true, nil
			}
			return false, nil
		})
	}()
	poll(t, "every dependent of a deleted instance to be collected", func() bool {
		for _, o := range instances {
			if !configMapGone(ns, "dep-"+o.GetName()) {
				return false
			}
		}
		return true
	})
	close(stop)
	select {
	case msg := <-failing:
		t.Errorf("the deleted CRD's monitor was reported failing: %s", msg)
	default:
	}
	if configMapGone(ns, "both") {
		t.Fatal("a ConfigMap with a live owner was deleted")
	}
	poll(t, "no node of the deleted kind observed", func() bool {
		nodes, _ := c.Graph().Nodes(nil)
		for _, nv := range nodes {
			if nv.Identity.Kind == s.kind && !nv.Virtual {
				return false
			}
		}
		return true
	})
	poll(t, "the reference to the deleted instance removed from the ConfigMap with a live owner", func() bool {
		cm, err := kubeClient.CoreV1().ConfigMaps(ns).Get(context.Background(), "both", metav1.GetOptions{})
		return err == nil && len(cm.OwnerReferences) == 1 && cm.OwnerReferences[0].UID == liveOwner.UID
	})

	// Created again under the same name: new instances are monitored and
	// collected as usual.
	createCRD(t, s)
	poll(t, "CRD to be established again", func() bool { return crdEstablished(s.name()) })
	kept := customResource(t, s, "v1", ns, "kept", []metav1.OwnerReference{cmRef(liveOwner, false)})
	garbage := customResource(t, s, "v1", ns, "garbage", []metav1.OwnerReference{ghostRef("ghost")})
	poll(t, "the recreated CRD's garbage instance to be collected", func() bool { return customResourceGone(s, "v1", ns, garbage.GetName()) })
	poll(t, "the recreated CRD's kept instance observed", func() bool {
		obj, ok := c.Graph().Object(kept.GetUID())
		return ok && obj.Identity.Kind == s.kind
	})
	if customResourceGone(s, "v1", ns, kept.GetName()) {
		t.Fatal("an instance with a live owner was deleted")
	}
	if err := c.Graph().CheckInvariants(); err != nil {
		t.Error(err)
	}
}

// The instances' delete events never reach kgc: every watch of kgc's is
// cut and held back (a partition) before the CRD is deleted, so kgc learns
// of the deletion only from discovery (periodic, every second) and from
// LISTs. Once discovery drops the resource, its LIST answers 404 and kgc
// must collect the instances' ConfigMaps while the watches are still held.
// Before, the stopped monitor's instances stayed observed, solid owners,
// and their ConfigMaps were kept until kgc restarted (then forever: the
// kind is no longer served). If the apiserver keeps the resource in
// discovery meanwhile, the monitor cannot relist while its watch is held:
// the test then releases the watches, and the monitor's LIST answering 404
// must do the same.
func TestCRDDeletedUnseenReleasesItsInstancesDependents(t *testing.T) {
	ft := faultproxy.New(faultproxy.Config{})
	c, _ := startCollectorVia(t, ft, time.Second)
	ns := newNamespace(t)
	s := newCRDSpec("unseen.kgc.test", "v1")
	createCRD(t, s)
	poll(t, "CRD to be established", func() bool { return crdEstablished(s.name()) })
	liveOwner := configMap(t, ns, "live-owner", nil)
	var instances []metav1.Object
	for i := range 5 {
		instances = append(instances, customResource(t, s, "v1", ns, "w"+strconv.Itoa(i), nil))
	}
	for _, o := range instances {
		configMap(t, ns, "dep-"+o.GetName(), []metav1.OwnerReference{refTo(o, s.group+"/v1", s.kind, false)})
	}
	both := configMap(t, ns, "both", []metav1.OwnerReference{refTo(instances[0], s.group+"/v1", s.kind, false), cmRef(liveOwner, false)})
	poll(t, "kgc to monitor the CRD", func() bool { return monitoring(c, s, "v1") })
	poll(t, "the instances and dependents observed", func() bool {
		for _, o := range append([]metav1.Object{both}, instances...) {
			if _, ok := c.Graph().Object(o.GetUID()); !ok {
				return false
			}
		}
		return true
	})
	if cut := ft.HoldWatches(); cut == 0 {
		t.Fatal("kgc had no open watch to cut")
	}
	deleteCRDAndWait(t, s.name())
	depsGone := func() bool {
		for _, o := range instances {
			if !configMapGone(ns, "dep-"+o.GetName()) {
				return false
			}
		}
		return true
	}
	stopped := pollErr(20*time.Second, func() bool { _, ok := c.MonitorStatus()[s.gvr("v1")]; return !ok }) == nil
	if stopped {
		t.Log("discovery dropped the resource while kgc's watches were held")
		poll(t, "the dependents of the unseen deleted instances to be collected (watches held)", depsGone)
		if !ft.HeldWatches() {
			t.Fatal("watches were released")
		}
	} else {
		t.Log("the apiserver still lists the deleted resource in discovery after 20s; releasing kgc's watches")
		ft.ReleaseWatches()
		poll(t, "the dependents of the deleted instances to be collected", depsGone)
		if st := c.MonitorStatus()[s.gvr("v1")]; st.Failing() {
			t.Errorf("the deleted CRD's monitor is failing: %v", st.LastError)
		}
	}
	poll(t, "the reference to the deleted instance removed from the ConfigMap with a live owner", func() bool {
		cm, err := kubeClient.CoreV1().ConfigMaps(ns).Get(context.Background(), "both", metav1.GetOptions{})
		return err == nil && len(cm.OwnerReferences) == 1 && cm.OwnerReferences[0].UID == liveOwner.UID
	})
	if configMapGone(ns, liveOwner.Name) {
		t.Fatal("the live owner was deleted")
	}
}
