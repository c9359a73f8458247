#!/usr/bin/env bash
# Proves that github.com/kgc-dev/kgc/pkg/kgc is importable the way users
# import it: from a throwaway module outside the repository and outside any
# workspace (GOWORK=off), whose go.mod points at this checkout with a
# replace directive, as a published version would come from the proxy.
# The module pastes the README's and docs/library.md's library snippets
# into a test and vets it (which type-checks the snippets against the
# public API), then builds a program that calls kgc.New. The sandbox module
# is not in that build: what it proves is what a user's module gets.
#
# That the snippets also work is sandbox/integration/library's
# snippets_test.go: it runs them against a real kube-apiserver and fails
# when their text and the documentation's differ.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

if grep -q '^replace' "$root/go.mod"; then
	echo "verify-importable: the root go.mod has replace directives" >&2; exit 1
fi
if grep -q 'k8s.io/kubernetes ' "$root/go.mod"; then
	echo "verify-importable: the root module requires k8s.io/kubernetes" >&2; exit 1
fi

block() { # file marker: the Go code between <!-- marker:start/end -->
	awk -v s="<!-- $2:start -->" -v e="<!-- $2:end -->" '$0==s{on=1; next} $0==e{on=0} on && !/^```/' "$1"
}
snippet=$(block "$root/README.md" envtest-snippet)
nssnippet=$(block "$root/docs/library.md" envtest-namespace-snippet)
if [ -z "$snippet" ] || [ -z "$nssnippet" ]; then
	echo "verify-importable: a library snippet is missing from README.md or docs/library.md" >&2; exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
cat > go.mod <<MOD
module example.com/consumer

go 1.26.0

require github.com/kgc-dev/kgc v0.0.0

replace github.com/kgc-dev/kgc => $root
MOD
cat > main.go <<'MAIN'
// Command consumer builds a collector the way a program importing kgc
// does; it is built, never run.
package main

import (
	"k8s.io/client-go/rest"

	"github.com/kgc-dev/kgc/pkg/kgc"
)

func main() {
	if _, err := kgc.New(&rest.Config{Host: "https://127.0.0.1:6443"}, kgc.Options{}); err != nil {
		panic(err)
	}
}
MAIN
{
cat <<'HEAD'
package main

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kgc-dev/kgc/pkg/kgc"
)

func testReadme(ctx context.Context, t *testing.T, cfg *rest.Config) {
HEAD
printf '%s\n' "$snippet" | sed 's/^\(.\)/\t\1/'
cat <<'MID'
}

func testNamespace(ctx context.Context, t *testing.T, cfg *rest.Config) {
MID
printf '%s\n' "$nssnippet" | sed 's/^\(.\)/\t\1/'
cat <<'TAIL'
}

var _, _ = testReadme, testNamespace
TAIL
} > snippets_test.go

gofmt -l . | grep . && { echo "verify-importable: the pasted snippets are not gofmt-clean" >&2; exit 1; }
# Built as CI builds everything without -race (static, paths trimmed, as a
# release), so that the dependencies compiled for the rest of CI serve here.
export GOWORK=off GOFLAGS='-mod=mod -trimpath' CGO_ENABLED=0
go mod tidy
go vet ./...
go build -o /dev/null .
echo "verify-importable: ok (pkg/kgc and the snippets of README.md and docs/library.md compile in a module outside the repository and any workspace)"
