package serve

import (
	"crypto/tls"
	"errors"
	"fmt"
	"sync/atomic"
)

// ErrTLS is the error of a TLS certificate or key that cannot be used.
var ErrTLS = errors.New("serve: TLS certificate")

// certificate is a TLS certificate and key read from files, read again by
// reload (Server.Reload, on SIGHUP) and handed to each new connection by
// GetCertificate: connections already open keep the certificate they
// started with.
type certificate struct {
	certFile, keyFile string
	cert              atomic.Pointer[tls.Certificate]
}

func newCertificate(certFile, keyFile string) (*certificate, error) {
	c := &certificate{certFile: certFile, keyFile: keyFile}
	if err := c.reload(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *certificate) reload() error {
	cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return fmt.Errorf("%w: %s and %s: %v", ErrTLS, c.certFile, c.keyFile, err)
	}
	c.cert.Store(&cert)
	return nil
}

func (c *certificate) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return c.cert.Load(), nil
}

// TLSConfig is the TLS configuration to serve the Handler with
// (http.Server.TLSConfig, then ServeTLS with empty file names), or nil
// without Config.TLSCertFile. It takes TLS 1.2 or later, and each new
// connection gets the certificate last loaded (Reload loads it again).
func (s *Server) TLSConfig() *tls.Config {
	if s.cert == nil {
		return nil
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: s.cert.get}
}
