package app

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/kgc-dev/kgc/internal/buildinfo"
)

// NewVersionCommand returns `kgc version`.
func NewVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print kgc's version, the commit it was built from and its Go version",
		Long:  "Version prints what the binary recorded when it was built: kgc's module version, the VCS revision (\"modified\" when the tree had uncommitted changes) and the Go version. /metrics exports the same as kgc_build_info.",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			writeVersion(cmd, buildinfo.Get())
			return nil
		},
	}
}

func writeVersion(cmd *cobra.Command, b buildinfo.Info) {
	rev := b.Revision
	if b.Modified {
		rev += " (modified)"
	}
	fmt.Fprintf(cmd.OutOrStdout(), "kgc %s\nrevision: %s\ngo: %s %s/%s\n", b.Version, rev, b.GoVersion, runtime.GOOS, runtime.GOARCH)
}
