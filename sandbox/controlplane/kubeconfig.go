package controlplane

import (
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

const kubeconfigName = "kgc-sandbox"

// writeKubeconfig writes an admin kubeconfig equivalent to cfg. The serving
// certificate is the apiserver's in-memory loopback certificate, issued for
// a fixed name rather than for 127.0.0.1, so tls-server-name is what makes
// verification succeed.
func writeKubeconfig(path string, cfg *rest.Config) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters[kubeconfigName] = &clientcmdapi.Cluster{
		Server:                   cfg.Host,
		CertificateAuthorityData: cfg.CAData,
		TLSServerName:            cfg.ServerName,
	}
	kc.AuthInfos[kubeconfigName] = &clientcmdapi.AuthInfo{
		Token:                 cfg.BearerToken,
		ClientCertificateData: cfg.CertData,
		ClientKeyData:         cfg.KeyData,
	}
	kc.Contexts[kubeconfigName] = &clientcmdapi.Context{
		Cluster:   kubeconfigName,
		AuthInfo:  kubeconfigName,
		Namespace: "default",
	}
	kc.CurrentContext = kubeconfigName
	// WriteToFile creates the file with mode 0600: it holds an admin token.
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return fmt.Errorf("writing kubeconfig %s: %w", path, err)
	}
	return nil
}
