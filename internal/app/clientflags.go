package app

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// outputAPIVersion is the apiVersion of what the inspection commands print
// with -o json|yaml|jsonpath: their answers are not Kubernetes objects, but
// kubectl's printers (and tools that read their output) want every
// document to say what it is.
const outputAPIVersion = "kgc.dev/v1alpha1"

// defaultRequestTimeout is --request-timeout's default for the inspection
// commands (kubectl's is none): a stuck API server or kgc fails the
// command instead of hanging it.
const defaultRequestTimeout = "30s"

// clientFlags are the flags every inspection command shares: kubectl's own
// kubeconfig flags (k8s.io/cli-runtime's ConfigFlags: --kubeconfig,
// --context, --cluster, --user, -n, -s/--server, --token, --as,
// --as-group, --certificate-authority, --request-timeout, …), kubectl's
// output flags (-o json|yaml|name|jsonpath=…|go-template=…, besides the
// commands' own text), and how to reach a running kgc (kgcFlags).
type clientFlags struct {
	config *genericclioptions.ConfigFlags
	print  *genericclioptions.PrintFlags
	kgc    kgcFlags
}

func newClientFlags() *clientFlags {
	cf := genericclioptions.NewConfigFlags(true)
	*cf.Timeout = defaultRequestTimeout
	return &clientFlags{config: cf, print: genericclioptions.NewPrintFlags("")}
}

func (f *clientFlags) addFlags(cmd *cobra.Command) {
	fs := cmd.Flags()
	f.config.AddFlags(fs)
	f.print.AddFlags(cmd)
	// Nothing here prints Kubernetes objects' managed fields or uses
	// kubectl's discovery cache.
	for _, name := range []string{"show-managed-fields", "cache-dir"} {
		_ = fs.MarkHidden(name)
	}
	fs.Lookup("output").Usage = "Output format: text (the default), json, yaml, name, jsonpath=…, jsonpath-as-json=…, jsonpath-file=…, go-template=…, go-template-file=…, template=…, templatefile=…. The documents have apiVersion " + outputAPIVersion + "."
	f.kgc.addFlags(fs)
}

// outputText reports whether -o asks for the command's own text.
func (f *clientFlags) outputText() bool {
	return f.print.OutputFormat == nil || *f.print.OutputFormat == "" || *f.print.OutputFormat == "text"
}

// validate checks the flags before anything is asked.
func (f *clientFlags) validate() error {
	if !f.outputText() {
		if _, err := f.print.ToPrinter(); err != nil {
			return fmt.Errorf("--output: %w", err)
		}
	}
	if _, err := f.timeout(); err != nil {
		return err
	}
	return f.kgc.validate()
}

// timeout is --request-timeout (0: none).
func (f *clientFlags) timeout() (time.Duration, error) {
	d, err := clientcmd.ParseTimeout(*f.config.Timeout)
	if err != nil {
		return 0, fmt.Errorf("--request-timeout: %w", err)
	}
	return d, nil
}

// clientConfig is the kubeconfig as the flags select it: --kubeconfig,
// then $KUBECONFIG and ~/.kube/config, then the in-cluster service
// account, with the flags' overrides (--context, --as, …).
func (f *clientFlags) clientConfig() clientcmd.ClientConfig {
	return f.config.ToRawKubeConfigLoader()
}

// restConfig is the API server's client config, ready for the
// inspection commands (wrap).
func (f *clientFlags) restConfig(deps InspectDeps) (*rest.Config, error) {
	cfg, err := f.config.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("loading client config: %w", err)
	}
	f.wrap(cfg, deps)
	return cfg, nil
}

// namespace is -n, else the kubeconfig context's namespace, else
// "default"; explicit reports whether -n was given.
func (f *clientFlags) namespace() (ns string, explicit bool) {
	ns, explicit, err := f.clientConfig().Namespace()
	if err != nil || ns == "" {
		return "default", explicit
	}
	return ns, explicit
}

func (f *clientFlags) wrap(cfg *rest.Config, deps InspectDeps) {
	// Listing every resource to find dependents would print the apiserver's
	// deprecation warnings (v1 Endpoints, …) over the answer.
	cfg.WarningHandler = rest.NoWarnings{}
	if cfg.QPS == 0 {
		cfg.QPS, cfg.Burst = 50, 100
	}
	if deps.WrapConfig != nil {
		deps.WrapConfig(cfg)
	}
}

// objectName names one Kubernetes object for -o name.
type objectName struct {
	APIVersion, Kind, Namespace, Name string
}

// answer is what an inspection command prints: its own text, or with -o
// a document of kind Kind (value, marshalled as JSON) or the names of the
// objects it is about.
type answer struct {
	kind  string
	value any
	names []objectName
	text  func(io.Writer) error
}

// write prints a as -o asks.
func (f *clientFlags) write(w io.Writer, a answer) error {
	if f.outputText() {
		return a.text(w)
	}
	printer, err := f.print.ToPrinter()
	if err != nil {
		return err
	}
	if *f.print.OutputFormat == "name" {
		seen := map[objectName]bool{}
		for _, n := range a.names {
			if seen[n] || n.Name == "" {
				continue
			}
			seen[n] = true
			u := &unstructured.Unstructured{}
			u.SetAPIVersion(n.APIVersion)
			u.SetKind(n.Kind)
			u.SetNamespace(n.Namespace)
			u.SetName(n.Name)
			if err := printer.PrintObj(u, w); err != nil {
				return err
			}
		}
		return nil
	}
	doc, err := document(a.kind, a.value)
	if err != nil {
		return err
	}
	return printer.PrintObj(doc, w)
}

// document is value as an object of kind (apiVersion outputAPIVersion):
// its JSON fields at the top level, or under items when it is a list.
func document(kind string, value any) (*unstructured.Unstructured, error) {
	data, err := json.Marshal(value)
	if err != nil {
		return nil, err
	}
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return nil, err
	}
	obj, ok := v.(map[string]any)
	if !ok {
		obj = map[string]any{"items": v}
	}
	u := &unstructured.Unstructured{Object: obj}
	u.SetAPIVersion(outputAPIVersion)
	u.SetKind(kind)
	return u, nil
}
