// Package security holds the connection-security settings that protctl's
// two configuration files share: TLS client settings (Redis and Kafka),
// Kafka SASL, and the bounded reading of secret files. The contexts file
// (internal/config) and the node config (internal/nodeconfig) both use
// these types and checks, so a field is spelled, defaulted and validated
// the same way in both.
//
// Secrets (SASL.Password) are never marshalled: they come from the
// environment or a file named in the config, and the field is tagged "-".
package security

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// TLS configures a TLS client. The yaml and json names are API in both
// config files.
type TLS struct {
	// Enabled turns TLS on (Kafka; for Redis, rediss:// or any file below
	// turns it on too).
	Enabled bool `yaml:"enabled,omitempty" json:"enabled"`
	// CA is a PEM file of the CAs that sign the server's certificate.
	// Default: the system roots.
	CA string `yaml:"ca,omitempty" json:"ca"`
	// Cert and Key are PEM files of a client certificate (both or
	// neither).
	Cert string `yaml:"cert,omitempty" json:"cert"`
	Key  string `yaml:"key,omitempty" json:"key"`
	// ServerName overrides the name checked in the server's certificate.
	ServerName string `yaml:"serverName,omitempty" json:"serverName"`
	// InsecureSkipVerify disables certificate verification (tests only).
	InsecureSkipVerify bool `yaml:"insecureSkipVerify,omitempty" json:"insecureSkipVerify"`
}

// On reports whether TLS is configured at all.
func (t TLS) On() bool {
	return t.Enabled || t.CA != "" || t.Cert != "" || t.ServerName != "" || t.InsecureSkipVerify
}

// Check checks what can be checked without reading a file: a client
// certificate needs both cert and key. The error is a *FieldError.
func (t TLS) Check() error {
	switch {
	case t.Cert != "" && t.Key == "":
		return &FieldError{Field: "key", Err: errors.New("cert and key go together: set both or neither")}
	case t.Cert == "" && t.Key != "":
		return &FieldError{Field: "cert", Err: errors.New("cert and key go together: set both or neither")}
	}
	return nil
}

// Config builds the tls.Config of t for a server named host (nil when t
// configures nothing). It reads the files; a file that cannot be used, or
// a cert without its key, is a *FieldError naming "ca", "cert" or "key".
func (t TLS) Config(host string) (*tls.Config, error) {
	if err := t.Check(); err != nil {
		return nil, err
	}
	if !t.On() {
		return nil, nil
	}
	conf := &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12, InsecureSkipVerify: t.InsecureSkipVerify} //nolint:gosec // opt-in, documented as tests only
	if t.ServerName != "" {
		conf.ServerName = t.ServerName
	}
	if t.CA != "" {
		pem, err := os.ReadFile(t.CA)
		if err != nil {
			return nil, &FieldError{Field: "ca", Err: unwrapPathError(err)}
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, &FieldError{Field: "ca", Err: fmt.Errorf("%s holds no PEM certificate", t.CA)}
		}
		conf.RootCAs = pool
	}
	if t.Cert != "" {
		cert, err := tls.LoadX509KeyPair(t.Cert, t.Key)
		if err != nil {
			return nil, &FieldError{Field: "cert", Err: err}
		}
		conf.Certificates = []tls.Certificate{cert}
	}
	return conf, nil
}

// SASL is Kafka SASL authentication.
type SASL struct {
	// Mechanism is PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (any case;
	// ParseMechanism normalises it). Required.
	Mechanism string `yaml:"mechanism,omitempty" json:"mechanism"`
	// Username is required.
	Username string `yaml:"username,omitempty" json:"username"`
	// PasswordFile holds the password (trailing newline ignored), unless
	// PROTCTL_KAFKA_PASSWORD is set.
	PasswordFile string `yaml:"passwordFile,omitempty" json:"passwordFile"`

	// Password is the resolved secret: never marshalled.
	Password string `yaml:"-" json:"-"`
}

// Mechanisms are the SASL mechanisms ParseMechanism accepts.
var Mechanisms = []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}

// ErrMechanism is wrapped by ParseMechanism's error for a mechanism it
// does not know.
var ErrMechanism = errors.New("security: unknown SASL mechanism")

// ParseMechanism normalises a SASL mechanism to upper case. An empty or
// unknown mechanism is an error wrapping ErrMechanism whose message lists
// the valid ones.
func ParseMechanism(s string) (string, error) {
	up := strings.ToUpper(strings.TrimSpace(s))
	for _, m := range Mechanisms {
		if up == m {
			return m, nil
		}
	}
	if up == "" {
		return "", mechanismError{fmt.Sprintf("is required: %s", mechanismList())}
	}
	return "", mechanismError{fmt.Sprintf("want %s, got %q", mechanismList(), s)}
}

type mechanismError struct{ msg string }

func (e mechanismError) Error() string { return e.msg }
func (e mechanismError) Unwrap() error { return ErrMechanism }

func mechanismList() string {
	return strings.Join(Mechanisms[:len(Mechanisms)-1], ", ") + " or " + Mechanisms[len(Mechanisms)-1]
}

// FieldError is a problem with one field of a TLS or SASL setting
// ("ca", "cert", "key", "mechanism"); the caller prefixes the field's
// path in its own file.
type FieldError struct {
	Field string
	Err   error
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Err.Error() }
func (e *FieldError) Unwrap() error { return e.Err }

// MaxSecretFile bounds a secret file: a password or token is short, and a
// path that names a device or a huge file by mistake must fail rather than
// hang or exhaust memory.
const MaxSecretFile = 64 << 10

// ReadSecretFile reads a regular file of at most MaxSecretFile bytes and
// returns it without its trailing newline. Errors do not repeat the
// secret's content; they name the path only where the OS error does not.
func ReadSecretFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", unwrapPathError(err)
	}
	defer f.Close()
	st, err := f.Stat()
	switch {
	case err != nil:
		return "", unwrapPathError(err)
	case !st.Mode().IsRegular():
		return "", fmt.Errorf("%s is not a regular file", path)
	case st.Size() > MaxSecretFile:
		return "", fmt.Errorf("%s is %d bytes, more than a secret's %d", path, st.Size(), MaxSecretFile)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxSecretFile+1))
	if err != nil {
		return "", unwrapPathError(err)
	}
	if len(data) > MaxSecretFile {
		return "", fmt.Errorf("%s grew past a secret's %d bytes while read", path, MaxSecretFile)
	}
	return strings.TrimRight(string(data), "\r\n"), nil
}

func unwrapPathError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
