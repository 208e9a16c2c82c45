package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// PKI is a throw-away certificate authority with a server certificate for
// 127.0.0.1 and localhost and a client certificate, written as PEM files
// for servers and for the CLI's --redis-tls-* flags and config files. The
// certificates are valid from an hour ago for a day.
type PKI struct {
	Dir string // where the files are

	CA         string // the CA's certificate (what a client trusts)
	ServerCert string // 127.0.0.1, ::1 and localhost, signed by the CA
	ServerKey  string
	ClientCert string // CN=protctl-test, for client authentication
	ClientKey  string

	caCert *x509.Certificate
	server tls.Certificate
	client tls.Certificate
}

// NewPKI generates a PKI in a new temporary directory of t.
func NewPKI(t testing.TB) *PKI {
	t.Helper()
	p, err := GeneratePKI(t.TempDir())
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return p
}

// GeneratePKI generates a CA and the server and client certificates it
// signs (ECDSA P-256) and writes them to dir as ca.pem, server.pem,
// server-key.pem, client.pem and client-key.pem.
func GeneratePKI(dir string) (*PKI, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	p := &PKI{
		Dir:        dir,
		CA:         filepath.Join(dir, "ca.pem"),
		ServerCert: filepath.Join(dir, "server.pem"),
		ServerKey:  filepath.Join(dir, "server-key.pem"),
		ClientCert: filepath.Join(dir, "client.pem"),
		ClientKey:  filepath.Join(dir, "client-key.pem"),
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("tls: CA key: %w", err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "protctl test CA " + fmt.Sprint(now.UnixNano())},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("tls: CA certificate: %w", err)
	}
	if p.caCert, err = x509.ParseCertificate(caDER); err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	if err := writePEM(p.CA, "CERTIFICATE", caDER); err != nil {
		return nil, err
	}
	leaf := func(tmpl *x509.Certificate, certPath, keyPath string) (tls.Certificate, error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return tls.Certificate{}, fmt.Errorf("tls: key: %w", err)
		}
		tmpl.SerialNumber = serial()
		tmpl.NotBefore, tmpl.NotAfter = now.Add(-time.Hour), now.Add(24*time.Hour)
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, caKey)
		if err != nil {
			return tls.Certificate{}, fmt.Errorf("tls: certificate %s: %w", tmpl.Subject.CommonName, err)
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return tls.Certificate{}, fmt.Errorf("tls: %w", err)
		}
		if err := writePEM(certPath, "CERTIFICATE", der); err != nil {
			return tls.Certificate{}, err
		}
		if err := writePEM(keyPath, "PRIVATE KEY", keyDER); err != nil {
			return tls.Certificate{}, err
		}
		return tls.LoadX509KeyPair(certPath, keyPath)
	}
	if p.server, err = leaf(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "localhost"},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, p.ServerCert, p.ServerKey); err != nil {
		return nil, err
	}
	if p.client, err = leaf(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "protctl-test"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, p.ClientCert, p.ClientKey); err != nil {
		return nil, err
	}
	return p, nil
}

// ServerTLS is a server's config (kfake.TLS): it presents the server
// certificate and, with requireClientCert, demands a client certificate
// signed by the CA.
func (p *PKI) ServerTLS(requireClientCert bool) *tls.Config {
	c := &tls.Config{Certificates: []tls.Certificate{p.server}, MinVersion: tls.VersionTLS12}
	if requireClientCert {
		c.ClientCAs = p.pool()
		c.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return c
}

// ClientTLS is a client's config that trusts the CA and presents the
// client certificate.
func (p *PKI) ClientTLS() *tls.Config {
	return &tls.Config{RootCAs: p.pool(), Certificates: []tls.Certificate{p.client}, MinVersion: tls.VersionTLS12}
}

func (p *PKI) pool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(p.caCert)
	return pool
}

func writePEM(path, typ string, der []byte) error {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		return fmt.Errorf("tls: %w", err)
	}
	return nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return big.NewInt(time.Now().UnixNano())
	}
	return n
}

// WithTLS starts the server with a TLS listener only (--port 0, --tls-port
// on the server's port) and certificates generated in its directory
// (Redis.TLS). Client certificates are optional (--tls-auth-clients
// optional): clients that only trust the CA connect.
func WithTLS() RedisOption {
	return func(c *redisConfig) {
		c.tls = true
		if c.tlsAuth == "" {
			c.tlsAuth = "optional"
		}
	}
}

// WithTLSClientAuth is WithTLS with --tls-auth-clients yes: a client must
// present a certificate signed by the test CA (Redis.TLS.ClientCert).
func WithTLSClientAuth() RedisOption {
	return func(c *redisConfig) { c.tls, c.tlsAuth = true, "yes" }
}

// AdminUser is the ACL user testenv's own clients (Client, FlushAll, the
// readiness probe) log in as on a server started WithACLUser.
const AdminUser = "testenv-admin"

// WithACLUser adds an ACL user with a password and rules (default: every
// key, channel and command: "~*", "&*", "+@all"). With any ACL user the
// default user is off, so a client must log in; testenv's own clients log
// in as AdminUser.
func WithACLUser(name, password string, rules ...string) RedisOption {
	return func(c *redisConfig) {
		c.users = append(c.users, aclUser{name: name, password: password, rules: rules})
	}
}

// aclArgs are the --user directives of the ACL users (the password is on
// redis-server's command line; the server stores only its hash).
func (r *Redis) aclArgs() []string {
	if len(r.users) == 0 {
		return nil
	}
	all := []string{"~*", "&*", "+@all"}
	args := []string{"--user", "default", "off"}
	args = append(args, append([]string{"--user", AdminUser, "on", ">" + r.adminPass}, all...)...)
	for _, u := range r.users {
		rules := u.rules
		if len(rules) == 0 {
			rules = all
		}
		args = append(args, append([]string{"--user", u.name, "on", ">" + u.password}, rules...)...)
	}
	return args
}

// Options are the go-redis options of testenv's own clients: the address,
// TLS with the test CA and the client certificate on a TLS server, and
// the admin login on a server with ACL users.
func (r *Redis) Options() *redis.Options {
	o := &redis.Options{Addr: r.Addr}
	if r.TLS != nil {
		o.TLSConfig = r.TLS.ClientTLS()
	}
	if len(r.users) > 0 {
		o.Username, o.Password = AdminUser, r.adminPass
	} else if r.password != "" {
		o.Password = r.password
	}
	return o
}

func randomSecret() string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return fmt.Sprint(time.Now().UnixNano())
	}
	return hex.EncodeToString(b)
}
