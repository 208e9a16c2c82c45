package security_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/protctl/protctl/internal/config/security"
	"github.com/protctl/protctl/internal/testenv"
)

func TestSASLParseMechanism(t *testing.T) {
	for in, want := range map[string]string{"plain": "PLAIN", "scram-sha-256": "SCRAM-SHA-256", " SCRAM-SHA-512 ": "SCRAM-SHA-512"} {
		if got, err := security.ParseMechanism(in); err != nil || got != want {
			t.Errorf("ParseMechanism(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for in, msg := range map[string]string{"": "is required: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", "GSSAPI": `want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, got "GSSAPI"`} {
		_, err := security.ParseMechanism(in)
		if !errors.Is(err, security.ErrMechanism) || err.Error() != msg {
			t.Errorf("ParseMechanism(%q): %v, want ErrMechanism saying %q", in, err, msg)
		}
	}
}

func TestConfigTLSFieldErrors(t *testing.T) {
	pki := testenv.NewPKI(t)
	if c, err := (security.TLS{}).Config("h"); c != nil || err != nil {
		t.Fatalf("no TLS: %v %v", c, err)
	}
	c, err := security.TLS{CA: pki.CA, Cert: pki.ClientCert, Key: pki.ClientKey}.Config("kafka.internal")
	if err != nil || c.RootCAs == nil || len(c.Certificates) != 1 || c.ServerName != "kafka.internal" {
		t.Fatalf("CA and client certificate: %+v %v", c, err)
	}
	if c, _ := (security.TLS{Enabled: true, ServerName: "other"}).Config("h"); c == nil || c.ServerName != "other" || c.RootCAs != nil {
		t.Fatalf("enabled with a server name, system roots: %+v", c)
	}
	cases := []struct {
		name  string
		tls   security.TLS
		field string
		want  string
	}{
		{"cert without key", security.TLS{Cert: pki.ClientCert}, "key", "set both or neither"},
		{"key without cert", security.TLS{Key: pki.ClientKey}, "cert", "set both or neither"},
		{"missing CA", security.TLS{CA: "/nonexistent/ca.pem"}, "ca", "no such file"},
		{"CA not a certificate", security.TLS{CA: pki.ClientKey}, "ca", "holds no PEM certificate"},
		{"cert and key that do not match", security.TLS{Cert: pki.ClientCert, Key: pki.ServerKey}, "cert", "private key does not match"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := c.tls.Config("")
			var fe *security.FieldError
			if !errors.As(err, &fe) || fe.Field != c.field || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("%v, want a FieldError on %s saying %q", err, c.field, c.want)
			}
		})
	}
}

func TestConfigReadSecretFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "pw")
	if err := os.WriteFile(p, []byte("s3cret\r\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if s, err := security.ReadSecretFile(p); err != nil || s != "s3cret" {
		t.Fatalf("%q %v", s, err)
	}
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, make([]byte, security.MaxSecretFile+1), 0o600); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{dir: "not a regular file", big: "more than a secret's", filepath.Join(dir, "nope"): "no such file"} {
		if _, err := security.ReadSecretFile(path); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ReadSecretFile(%s): %v, want %q", path, err, want)
		}
	}
}
