//go:build unix

package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// writeTestCert writes a self-signed certificate for 127.0.0.1 and its key
// to dir and returns their paths.
func writeTestCert(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "subtta test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// subtta serve with keys and TLS: loadtest with a key (from --key or the
// environment) gets every request answered exactly once over HTTPS;
// another key's requests to those streams get 404; a key taken out of the
// file is refused after SIGHUP.
func TestServeKeysTLSAndHangup(t *testing.T) {
	const keyA, keyB = "a7c1f0e39b2d48e5a6f7c8d9e0f1a2b3", "b8d2e1f4ac3e59f6b7a8d9e0f1a2b3c4"
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	if err := os.WriteFile(keys, []byte(keyA+" a\n"+keyB+" b\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, key := writeTestCert(t, dir)
	addr, stop, log := startServe(t, "--batch-size", "2", "--max-wait", "100ms", "--state-dir", filepath.Join(dir, "streams"),
		"--auth-keys", keys, "--tls-cert", cert, "--tls-key", key)
	url := "https://" + addr
	loadtest := func(args ...string) (int, map[string]any, string) {
		var out, errb bytes.Buffer
		st := run(append([]string{"loadtest", "--addr", url, "--cacert", cert, "--streams", "2", "--requests", "4", "--concurrency", "2", "--prefix", "cam", "--json"}, args...), &out, &errb)
		var rep map[string]any
		json.Unmarshal(out.Bytes(), &rep)
		return st, rep, errb.String()
	}
	st, rep, errs := loadtest("--key", keyA)
	if st != 0 || rep["ok"] != 8.0 || rep["exactly_once"] != true {
		t.Fatalf("loadtest with a key: status %d, %v, %s\n%s", st, rep, errs, log)
	}
	t.Setenv(apiKeyEnv, keyA)
	if st, rep, errs := loadtest(); st != 0 || rep["ok"] != 8.0 || rep["exactly_once"] != true {
		t.Fatalf("loadtest with $%s: status %d, %v, %s", apiKeyEnv, st, rep, errs)
	}
	// Another key: the streams are not found; the frozen model answers it.
	if st, rep, _ := loadtest("--key", keyB); st != 1 || rep["ok"] != 0.0 || rep["by_status"].(map[string]any)["404"] != 8.0 {
		t.Errorf("another key's loadtest on the streams: %v", rep)
	}
	if st, rep, _ := loadtest("--key", keyB, "--frozen"); st != 0 || rep["ok"] != 8.0 {
		t.Errorf("another key's frozen loadtest: %d %v", st, rep)
	}
	t.Setenv(apiKeyEnv, "")
	if st, rep, errs := loadtest("--frozen"); st != 1 || rep["by_status"].(map[string]any)["401"] != 8.0 || !strings.Contains(errs, "--key") {
		t.Errorf("loadtest without a key: %d %v %s", st, rep, errs)
	}

	// SIGHUP after B is taken out of the file: B is refused, A is not.
	if err := os.WriteFile(keys, []byte(keyA+" a\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if st, rep, _ := loadtest("--key", keyB, "--frozen", "--streams", "1", "--requests", "1"); st == 1 && rep["by_status"].(map[string]any)["401"] == 1.0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a key taken out of the file is still accepted 30 s after SIGHUP\n%s", log)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if st, rep, _ := loadtest("--key", keyA); st != 0 || rep["ok"] != 8.0 {
		t.Errorf("the key kept after SIGHUP: %d %v", st, rep)
	}
	if !strings.Contains(log.String(), "keys reloaded") || !strings.Contains(log.String(), "listening on https://") {
		t.Errorf("serve log:\n%s", log)
	}
	if strings.Contains(log.String(), keyA) || strings.Contains(log.String(), keyB) {
		t.Errorf("the serve log holds a key:\n%s", log)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
