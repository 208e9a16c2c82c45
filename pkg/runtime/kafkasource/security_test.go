package kafkasource_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/runtime/kafkasource"
)

func TestSASL(t *testing.T) {
	for _, mech := range []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"} {
		t.Run(mech, func(t *testing.T) {
			t.Parallel()
			k := testenv.StartKafkaWith(t, []kfake.Opt{kfake.EnableSASL(), kfake.Superuser(mech, "alice", "s3cret")}, 2, "orders")

			ok := newSource(t, k.Brokers, kafkasource.WithSASL(strings.ToLower(mech), "alice", "s3cret"))
			if got, err := ok.Partitions(testCtx(t), "orders"); err != nil || !slices.Equal(got, []int32{0, 1}) {
				t.Fatalf("with the right password: Partitions = %v, %v", got, err)
			}

			// kfake hangs up on bad credentials (a real broker first answers
			// SASL_AUTHENTICATION_FAILED, which the error then quotes), so
			// all this can check is a bounded, unreachable-class failure.
			bad := newSource(t, k.Brokers, kafkasource.WithSASL(mech, "alice", "wrong"))
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			start := time.Now()
			_, err := bad.Partitions(ctx, "orders")
			if took := time.Since(start); took > 3*time.Second {
				t.Fatalf("with a wrong password: took %v past a 2s deadline", took)
			}
			if !errors.Is(err, kafkasource.ErrUnreachable) {
				t.Fatalf("with a wrong password: %v, want ErrUnreachable (the handshake failed)", err)
			}
			t.Logf("wrong password: %v", err)

			none := newSource(t, k.Brokers)
			ctx2, cancel2 := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel2()
			if _, err := none.Partitions(ctx2, "orders"); err == nil {
				t.Fatal("without SASL against a SASL cluster: Partitions succeeded")
			}
		})
	}
}

func TestTLS(t *testing.T) {
	serverCfg, clientCfg := selfSignedTLS(t)
	k := testenv.StartKafkaWith(t, []kfake.Opt{
		kfake.TLS(serverCfg), kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-512", "bob", "pw"),
	}, 3, "orders")

	s := newSource(t, k.Brokers, kafkasource.WithTLS(clientCfg), kafkasource.WithSASL("SCRAM-SHA-512", "bob", "pw"))
	if got, err := s.Partitions(testCtx(t), "orders"); err != nil || len(got) != 3 {
		t.Fatalf("over TLS with SCRAM: Partitions = %v, %v", got, err)
	}

	untrusted := newSource(t, k.Brokers, kafkasource.WithTLS(&tls.Config{MinVersion: tls.VersionTLS12}),
		kafkasource.WithSASL("SCRAM-SHA-512", "bob", "pw"))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err := untrusted.Partitions(ctx, "orders")
	if !errors.Is(err, kafkasource.ErrUnreachable) || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("with an untrusted certificate: %v, want ErrUnreachable naming the certificate problem", err)
	}
}

// selfSignedTLS makes a certificate for 127.0.0.1 and a client config that
// trusts only it.
func selfSignedTLS(t *testing.T) (server, client *tls.Config) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "kfake"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:              []string{"localhost"},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	server = &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key, Leaf: cert}},
		MinVersion:   tls.VersionTLS12,
	}
	client = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return server, client
}
