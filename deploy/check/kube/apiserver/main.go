// Command apiserver runs the real Kubernetes API server
// (k8s.io/kubernetes/cmd/kube-apiserver/app, the code of the release
// binary) on 127.0.0.1 over an etcd embedded in the same process, for
// deploy/check/kubernetes.sh. It runs no controllers, scheduler or
// kubelet: what it proves is what the API server itself decides (schema,
// field validation, defaulting, admission), not that a pod would run.
//
//	apiserver -dir DIR
//
// DIR gets etcd's data, the API server's certificates and keys, and
// DIR/kubeconfig for kubectl (a static token of a system:masters user).
// It runs until killed.
package main

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"flag"
	"fmt"
	"log"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	dir := flag.String("dir", "", "directory for etcd's data, keys and the kubeconfig")
	flag.Parse()
	if *dir == "" {
		log.Fatal("apiserver: -dir is required")
	}
	if err := os.MkdirAll(*dir, 0o700); err != nil {
		log.Fatal(err)
	}

	etcdURL := startEtcd(filepath.Join(*dir, "etcd"))

	saKey := filepath.Join(*dir, "sa-key.pem")
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		log.Fatal(err)
	}
	writeFile(saKey, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}))

	token := fmt.Sprintf("%x", randomBytes(16))
	writeFile(filepath.Join(*dir, "tokens.csv"), []byte(token+",deploy-check,deploy-check,system:masters\n"))

	port := freePort()
	writeFile(filepath.Join(*dir, "kubeconfig"), []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: check
  cluster:
    server: https://127.0.0.1:%d
    insecure-skip-tls-verify: true
users:
- name: check
  user:
    token: %s
contexts:
- name: check
  context: {cluster: check, user: check, namespace: default}
current-context: check
`, port, token)))

	cmd := app.NewAPIServerCommand()
	cmd.SetArgs([]string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", port),
		"--cert-dir=" + filepath.Join(*dir, "certs"),
		"--token-auth-file=" + filepath.Join(*dir, "tokens.csv"),
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + saKey,
		"--service-account-signing-key-file=" + saKey,
		// The default range; nothing here sends traffic to it.
		"--service-cluster-ip-range=10.0.0.0/24",
		"--endpoint-reconciler-type=none",
		"--v=0",
	})
	os.Exit(cli.Run(cmd))
}

// startEtcd starts a one-member etcd on free loopback ports and returns
// its client URL once it is ready.
func startEtcd(dir string) string {
	cfg := embed.NewConfig()
	cfg.Name = "deploy-check"
	cfg.Dir = dir
	cfg.LogLevel = "error"
	client, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", freePort()))
	peer, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", freePort()))
	cfg.ListenClientUrls = []url.URL{*client}
	cfg.AdvertiseClientUrls = []url.URL{*client}
	cfg.ListenPeerUrls = []url.URL{*peer}
	cfg.AdvertisePeerUrls = []url.URL{*peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		log.Fatalf("apiserver: etcd: %v", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		log.Fatalf("apiserver: etcd: %v", err)
	case <-time.After(60 * time.Second):
		log.Fatal("apiserver: etcd not ready after 60s")
	}
	return client.String()
}

func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		log.Fatal(err)
	}
	return b
}

func writeFile(p string, b []byte) {
	if err := os.WriteFile(p, b, 0o600); err != nil {
		log.Fatal(err)
	}
}
