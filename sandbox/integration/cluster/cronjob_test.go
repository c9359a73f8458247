package cluster

import (
	"context"
	"fmt"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// A CronJob's history: Jobs run one after another, and the CronJob
// controller deletes the oldest finished ones past successfulJobsHistoryLimit
// (1), in the background; kgc then collects their Pods. Deleting the
// CronJob collects the Job left and its Pods.
//
// The CronJob is suspended (a schedule of every minute is too slow for a
// test): the Jobs are created by the test, with the controller reference the
// CronJob controller would give them, and named in their order so that the
// controller's oldest-first order (by start time, then name) is theirs.
func TestCronJobHistory(t *testing.T) {
	t.Parallel()
	tc := newTestCase(t)
	const name = "nightly"
	labels := tc.podLabels(name, false)
	cj, err := kubeClient.BatchV1().CronJobs(tc.ns).Create(tc.ctx, &batchv1.CronJob{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: batchv1.CronJobSpec{
			Schedule:                   "0 0 1 1 *",
			Suspend:                    ptr.To(true),
			SuccessfulJobsHistoryLimit: ptr.To[int32](1),
			FailedJobsHistoryLimit:     ptr.To[int32](1),
			JobTemplate: batchv1.JobTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: batchv1.JobSpec{
					Template: func() corev1.PodTemplateSpec {
						t := podTemplate(labels)
						t.Spec.RestartPolicy = corev1.RestartPolicyNever
						return t
					}(),
				},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cronJob := objOf(cronJobsGVR, cj)

	var prev obj
	var prevPods []obj
	const jobs = 4
	for i := range jobs {
		job := &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{
				Name:            fmt.Sprintf("%s-%d", name, i),
				Labels:          labels,
				OwnerReferences: []metav1.OwnerReference{ownerRef(cronJob, "batch/v1", "CronJob", true)},
			},
			Spec: *cj.Spec.JobTemplate.Spec.DeepCopy(),
		}
		job, err := kubeClient.BatchV1().Jobs(tc.ns).Create(tc.ctx, job, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		j := objOf(jobsGVR, job)
		pods := tc.waitJobComplete(j)
		if i > 0 {
			// The CronJob controller removed the previous Job (2 > 1
			// finished), and kgc its Pods.
			tc.waitGone(append([]obj{prev}, prevPods...)...)
			if audit.deleted(tc.ns, prev.uid) {
				t.Errorf("kgc deleted %s, which the CronJob controller was to delete", prev)
			}
			for _, p := range prevPods {
				if !audit.deleted(tc.ns, p.uid) {
					t.Errorf("%s is gone, but kgc did not delete it", p)
				}
			}
		}
		prev, prevPods = j, pods
	}
	// The newest Job and its Pod are history to keep.
	keep := []kept{aliveOwnedBy(prev, cronJob.uid)}
	for _, p := range prevPods {
		keep = append(keep, aliveOwnedBy(p, prev.uid))
	}
	tc.assertKeptAfterGC(keep...)

	// Deleting the CronJob collects the rest.
	tc.del(cronJob, metav1.DeletePropagationBackground)
	tc.waitGone(append([]obj{cronJob, prev}, prevPods...)...)
	for _, o := range append([]obj{prev}, prevPods...) {
		if !audit.deleted(tc.ns, o.uid) {
			t.Errorf("%s is gone, but kgc did not delete it", o)
		}
	}
}

// waitJobComplete waits until the Job j is Complete, and returns its Pods.
func (tc *testCase) waitJobComplete(j obj) []obj {
	tc.t.Helper()
	var pods []obj
	tc.poll("job "+j.name+" to complete", waitTimeout, func(ctx context.Context) (bool, string, error) {
		job, err := kubeClient.BatchV1().Jobs(tc.ns).Get(ctx, j.name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		complete := false
		for _, c := range job.Status.Conditions {
			if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
				complete = true
			}
		}
		desc := fmt.Sprintf("succeeded %d, conditions %v", job.Status.Succeeded, job.Status.Conditions)
		if !complete {
			return false, desc, nil
		}
		l, err := kubeClient.CoreV1().Pods(tc.ns).List(ctx, metav1.ListOptions{LabelSelector: batchv1.JobNameLabel + "=" + j.name})
		if err != nil {
			return false, "", err
		}
		pods = podObjs(l.Items)
		return len(pods) > 0, desc + "; pods " + describePods(l.Items), nil
	})
	return pods
}
