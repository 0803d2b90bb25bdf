package testenv

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// TLSDir is the directory of the test CA and server certificate that
// e2e/infra makes (ensure_certs in common.sh): DECANT_TEST_TLS_DIR, else
// $DECANT_INFRA_DIR/tls, else /tmp/decant-infra/tls.
func TLSDir() string {
	if d := os.Getenv("DECANT_TEST_TLS_DIR"); d != "" {
		return d
	}
	return filepath.Join(env("DECANT_INFRA_DIR", "/tmp/decant-infra"), "tls")
}

// KafkaSASLBrokers are the test broker's SASL_SSL (SCRAM-SHA-512)
// listener addresses (e2e/infra/kafka.sh, DECANT_KAFKA_SASL_PORT).
func KafkaSASLBrokers() []string {
	return strings.Split(env("DECANT_TEST_KAFKA_SASL_BROKERS", "127.0.0.1:59094"), ",")
}

// TestCA is the test CA's certificate file and the server certificate it
// signed (for 127.0.0.1 and localhost), read from TLSDir.
type TestCA struct {
	CAFile string
	Server tls.Certificate
}

// CA returns the test CA; a missing one is a missing server (see
// unavailable).
func CA(t testing.TB) *TestCA {
	t.Helper()
	Integration(t)
	d := TLSDir()
	cert, err := tls.LoadX509KeyPair(filepath.Join(d, "server.crt"), filepath.Join(d, "server.key"))
	if err == nil {
		_, err = os.Stat(filepath.Join(d, "ca.crt"))
	}
	if err != nil {
		unavailable(t, "the test CA (made by e2e/infra/pg.sh and kafka.sh)", err)
	}
	return &TestCA{CAFile: filepath.Join(d, "ca.crt"), Server: cert}
}

// OtherCA writes a fresh self-signed CA certificate, which signed none of
// the test servers' certificates, and returns its path: the "wrong CA".
func OtherCA(t testing.TB) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "not the decant test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return WriteFile(t, filepath.Join(t.TempDir(), "other-ca.crt"), string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
}

// TLSProxy serves https on 127.0.0.1 with the test CA's server certificate
// and forwards every request to target (e.g. the test Elasticsearch).
// With a user, requests without that user and password get 401, as a
// search engine with security on answers. It returns the proxy's URL; the
// proxy stops at cleanup.
func (ca *TestCA) TLSProxy(t testing.TB, target, user, password string) string {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if user != "" {
			if u, p, ok := r.BasicAuth(); !ok || u != user || p != password {
				w.Header().Set("WWW-Authenticate", `Basic realm="security"`)
				http.Error(w, `{"error":"unable to authenticate user","status":401}`, http.StatusUnauthorized)
				return
			}
		}
		r.Header.Del("Authorization")
		proxy.ServeHTTP(w, r)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Server}, MinVersion: tls.VersionTLS12}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the wrong-CA tests' failed handshakes are expected
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.URL
}

// PlainPG listens on 127.0.0.1 and answers every connection as a
// PostgreSQL server without SSL does: 'N' to the SSLRequest, then it
// closes. It returns the address; the listener stops at cleanup.
func PlainPG(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				buf := make([]byte, 8) // length 8, code 80877103
				if _, err := c.Read(buf); err == nil {
					_, _ = c.Write([]byte{'N'})
				}
				_, _ = c.Read(make([]byte, 1024))
			}()
		}
	}()
	return ln.Addr().String()
}

// SCRAMUser creates (or resets) a SCRAM-SHA-512 user on the test broker,
// through its PLAINTEXT listener, and deletes it at cleanup. The broker's
// SASL_SSL listener authenticates it.
func (k *KafkaEnv) SCRAMUser(t testing.TB, user, password string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	res, err := k.Admin.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: user, Mechanism: kadm.ScramSha512, Iterations: 4096, Password: password}})
	if err == nil {
		err = res.Error()
	}
	if err != nil {
		t.Fatalf("Kafka: create SCRAM-SHA-512 user %s: %v", user, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		_, _ = k.Admin.AlterUserSCRAMs(ctx, []kadm.DeleteSCRAM{{User: user, Mechanism: kadm.ScramSha512}}, nil)
	})
}

// CheckSASLListener fails (CI) or skips the test when the broker's
// SASL_SSL listener does not answer a TLS handshake, e.g. a broker
// started by an older kafka.sh.
func CheckSASLListener(t testing.TB) {
	t.Helper()
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second}, Config: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // reachability only
	c, err := d.DialContext(context.Background(), "tcp", KafkaSASLBrokers()[0])
	if err != nil {
		unavailable(t, "Kafka's SASL_SSL listener "+KafkaSASLBrokers()[0], err)
		return
	}
	c.Close()
}

// RequireSSL fails (CI) or skips the test unless the server has ssl on
// (e2e/infra/pg.sh turns it on), and checks that this plain
// (sslmode=disable) pool still works beside it.
func (p *PG) RequireSSL(t testing.TB) {
	t.Helper()
	var ssl string
	var plainSession bool
	if err := p.Pool.QueryRow(context.Background(), `SELECT current_setting('ssl'), ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()`).Scan(&ssl, &plainSession); err != nil {
		t.Fatalf("PostgreSQL: ssl settings: %v", err)
	}
	if ssl != "on" {
		unavailable(t, "PostgreSQL with ssl = on", errors.New("ssl is off (e2e/infra/pg.sh up turns it on)"))
	}
	if plainSession {
		t.Fatalf("the test's sslmode=disable pool uses TLS")
	}
}
