// Package deploy tests what installs kgc in a cluster: the manifests in the
// repository's deploy/ directory, against a real kube-apiserver (server-side
// dry run of every object; cascades run by kgc with exactly the ClusterRole's
// permissions, through impersonation, and a negative control without the
// delete verb), the Dockerfile's build command (run as written; the binary
// must be static), and two replicas of that binary run with the
// Deployment's arguments as kgc's service account.
//
// It also tests what a release ships (release_test.go): `make dist` for this
// machine's platform stamps its binary with the version, commit and date
// given, checksums and an SBOM describe what it archived, and the
// Dockerfile, given the same stamp, builds the same bytes.
package deploy
