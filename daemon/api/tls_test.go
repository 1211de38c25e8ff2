package api_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/flowforge/flowforge/core/auth"
	"github.com/flowforge/flowforge/core/client"
	"github.com/flowforge/flowforge/core/store/storetest"
	"github.com/flowforge/flowforge/daemon/api"
)

// selfSigned writes a certificate for 127.0.0.1 and its key as PEM files
// in a temporary directory and returns their paths and the certificate.
func selfSigned(t *testing.T) (certFile, keyFile string, cert *x509.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "flowforge-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	if cert, err = x509.ParseCertificate(der); err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile, cert
}

// TestWithACertificateTheAPISpeaksHTTPSOnly: with --tls-cert and
// --tls-key the server answers over TLS a client that trusts the
// certificate, and a plain-HTTP request gets no API answer; a certificate
// that cannot be loaded fails Start.
func TestWithACertificateTheAPISpeaksHTTPSOnly(t *testing.T) {
	t.Parallel()
	s, _ := storetest.New(t)
	c := client.FromStore(s, client.Options{})
	tok, err := c.CreateToken(t.Context(), "ci", auth.RoleViewer, client.TokenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, cert := selfSigned(t)
	addr := startServer(t, api.Config{Client: c, Listen: "127.0.0.1:0", TLSCert: certFile, TLSKey: keyFile})
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer hc.CloseIdleConnections()
	req, _ := http.NewRequestWithContext(t.Context(), "GET", "https://"+addr+"/v1/workflows", nil)
	req.Header.Set("Authorization", "Bearer "+tok.Secret)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("over TLS: %d", resp.StatusCode)
	}
	req, _ = http.NewRequestWithContext(t.Context(), "GET", "http://"+addr+"/v1/workflows", nil)
	req.Header.Set("Authorization", "Bearer "+tok.Secret)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatal("a plain-HTTP request was answered by the API")
		}
	}
	srv, err := api.New(api.Config{Client: c, Listen: "127.0.0.1:0", TLSCert: keyFile, TLSKey: certFile})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err == nil {
		t.Fatal("Start with the certificate and key swapped: no error")
	}
}
