package config

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestTLSHint: each client-side TLS failure names the setting to check;
// other errors get no hint.
func TestTLSHint(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("dial: %w", &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}),
			"check kafka.tls.ca_file: it must hold the CA that signed the server's certificate"},
		{fmt.Errorf("dial: %w", x509.HostnameError{Certificate: &x509.Certificate{}, Host: "db"}),
			"check kafka.brokers: each host must be a name or IP the server's certificate lists"},
		{fmt.Errorf("dial: %w", tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}),
			"check kafka.brokers: that port does not speak TLS; use the server's TLS port"},
		{errors.New(`Get "https://127.0.0.1:9200/": http: server gave HTTP response to HTTPS client`),
			"check kafka.brokers: that port does not speak TLS; use the server's TLS port"},
		{errors.New("connection refused"), ""},
	} {
		if got := TLSHint("kafka", "kafka.brokers", c.err); got != c.want {
			t.Errorf("TLSHint(%v) = %q, want %q", c.err, got, c.want)
		}
	}
	if got := TLSHint("elasticsearch", "elasticsearch.urls", &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}); !strings.HasPrefix(got, "check elasticsearch.tls.ca_file") {
		t.Errorf("elasticsearch hint %q does not name elasticsearch.tls.ca_file", got)
	}
}
