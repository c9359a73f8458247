#!/usr/bin/env bash
# Proves that github.com/kgc-dev/kgc/pkg/kgc is importable the way users
# import it, and that the library's envtest snippets work as written:
#   - the root module has no replace directives and does not require
#     k8s.io/kubernetes;
#   - a throwaway module outside the repository (wired to this checkout by a
#     go.work, as a user's module would be by its go.mod) pastes the README
#     snippet into a test, starts the sandbox control plane in place of
#     envtest, and checks that deleting an owner deletes its dependents;
#   - the same module runs the namespace snippet of docs/library.md, which
#     deletes a namespace and waits for it to be gone (kgc's namespace
#     lifecycle).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

if grep -q '^replace' "$root/go.mod"; then
	echo "verify-importable: the root go.mod has replace directives" >&2; exit 1
fi
if grep -q 'k8s.io/kubernetes ' "$root/go.mod"; then
	echo "verify-importable: the root module requires k8s.io/kubernetes" >&2; exit 1
fi

snippet=$(awk '/<!-- envtest-snippet:start -->/{on=1; next} /<!-- envtest-snippet:end -->/{on=0} on && !/^```/' "$root/README.md")
if [ -z "$snippet" ]; then
	echo "verify-importable: no envtest snippet found in README.md" >&2; exit 1
fi

nssnippet=$(awk '/<!-- envtest-namespace-snippet:start -->/{on=1; next} /<!-- envtest-namespace-snippet:end -->/{on=0} on && !/^```/' "$root/docs/library.md")
if [ -z "$nssnippet" ]; then
	echo "verify-importable: no envtest namespace snippet found in docs/library.md" >&2; exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/consumer"
cat > "$tmp/go.work" <<WORK
go 1.26.0

use (
	./consumer
	$root
	$root/sandbox
)
WORK
cat > "$tmp/consumer/go.mod" <<'MOD'
module example.com/consumer

go 1.26.0

// github.com/kgc-dev/kgc (and its sandbox, standing in for envtest) come
// from the workspace, as a published version would come from the proxy.
require (
	k8s.io/api v0.36.3
	k8s.io/apimachinery v0.36.3
	k8s.io/client-go v0.36.3
)
MOD
{
cat <<'HEAD'
package consumer

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kgc-dev/kgc/pkg/kgc"
	"github.com/kgc-dev/kgc/sandbox/controlplane"
)

// startAPIServer starts the sandbox's etcd + kube-apiserver (standing in
// for envtest) until the test ends: the ctx and cfg the snippets use.
func startAPIServer(t *testing.T) (context.Context, *rest.Config) {
	ctx := t.Context()
	cp, err := controlplane.Start(ctx, controlplane.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Stop() })
	return ctx, cp.Config
}

func TestReadmeSnippet(t *testing.T) {
	ctx, cfg := startAPIServer(t)

	// ---- README.md envtest snippet, verbatim ----
HEAD
printf '%s\n' "$snippet" | sed 's/^\(.\)/\t\1/'
cat <<'TAIL'
	// ---- end of snippet ----

	client := kubernetes.NewForConfigOrDie(cfg)
	cms := client.CoreV1().ConfigMaps("default")
	owner, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ref := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID}
	for i := range 3 {
		dep := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("dep-%d", i), OwnerReferences: []metav1.OwnerReference{ref}}}
		if _, err := cms.Create(ctx, dep, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := cms.Delete(ctx, owner.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		for i := range 3 {
			if _, err := cms.Get(ctx, fmt.Sprintf("dep-%d", i), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the README snippet did not give cascading deletion: %v", err)
	}
}

func TestLibraryNamespaceSnippet(t *testing.T) {
	ctx, cfg := startAPIServer(t)

	// ---- docs/library.md envtest namespace snippet, verbatim ----
TAIL
printf '%s\n' "$nssnippet" | sed 's/^\(.\)/\t\1/'
cat <<'TAIL'
	// ---- end of snippet ----
}
TAIL
} > "$tmp/consumer/readme_test.go"

cd "$tmp/consumer"
gofmt -l . | grep . && { echo "verify-importable: the pasted snippet is not gofmt-clean" >&2; exit 1; }
# With the race detector, as the README's test command builds: the control
# plane's packages compiled here are the ones it reuses, instead of a
# second, non-race build of kube-apiserver (a third of CI on a cold cache).
# go test vets the package first.
go test -race -count=1 ./...
echo "verify-importable: ok (the snippets of README.md and docs/library.md give cascading deletion and namespace deletion from a module outside the repository)"
