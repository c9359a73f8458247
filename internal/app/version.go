package app

import (
	"fmt"
	"io"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/kgc-dev/kgc/internal/buildinfo"
)

// NewVersionCommand returns `kgc version`.
func NewVersionCommand() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print kgc's version, the commit it was built from, its build date and its Go version",
		Long: "Version prints what the binary recorded when it was built: kgc's version, the VCS revision (\"modified\" when the tree had " +
			"uncommitted changes), the build date (a release's is its commit's time, so that a rebuild of the tag is identical) and the Go " +
			"version and platform. /metrics exports the same as kgc_build_info.",
		Example: "  kgc version\n  kgc version -o json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch output {
			case "text":
				writeVersion(cmd.OutOrStdout(), buildinfo.Get())
				return nil
			case "json":
				return writeJSON(cmd.OutOrStdout(), newVersionJSON(buildinfo.Get()))
			}
			return fmt.Errorf("--output %q: want text or json", output)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "Output format: text or json.")
	return cmd
}

// versionJSON is `kgc version -o json`: its keys are part of kgc's
// interface (docs/support.md), so that scripts can check what runs.
type versionJSON struct {
	Version   string `json:"version"`
	Revision  string `json:"revision"`
	Modified  bool   `json:"modified"`
	BuildDate string `json:"buildDate"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

func newVersionJSON(b buildinfo.Info) versionJSON {
	return versionJSON{
		Version: b.Version, Revision: b.Revision, Modified: b.Modified, BuildDate: b.BuildDate,
		GoVersion: b.GoVersion, Platform: runtime.GOOS + "/" + runtime.GOARCH,
	}
}

func writeVersion(w io.Writer, b buildinfo.Info) {
	rev := b.Revision
	if b.Modified {
		rev += " (modified)"
	}
	fmt.Fprintf(w, "kgc %s\nrevision: %s\nbuild date: %s\ngo: %s %s/%s\n", b.Version, rev, b.BuildDate, b.GoVersion, runtime.GOOS, runtime.GOARCH)
}
