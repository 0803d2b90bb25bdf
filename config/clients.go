package config

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// ClientOptions turns the kafka section into franz-go connection options
// (brokers, compression, TLS, SASL). Every stage and command builds its
// Kafka clients from these.
func (k Kafka) ClientOptions() ([]kgo.Opt, error) {
	opts := []kgo.Opt{kgo.SeedBrokers(k.Brokers...)}
	switch k.Compression {
	case "none", "":
		// franz-go compresses with snappy unless told otherwise: "none"
		// must say so, or every batch is compressed by the producer and
		// decompressed by the broker (to validate it) and the consumer.
		opts = append(opts, kgo.ProducerBatchCompression(kgo.NoCompression()))
	case "lz4":
		opts = append(opts, kgo.ProducerBatchCompression(kgo.Lz4Compression(), kgo.NoCompression()))
	case "snappy":
		opts = append(opts, kgo.ProducerBatchCompression(kgo.SnappyCompression(), kgo.NoCompression()))
	case "zstd":
		opts = append(opts, kgo.ProducerBatchCompression(kgo.ZstdCompression(), kgo.NoCompression()))
	case "gzip":
		opts = append(opts, kgo.ProducerBatchCompression(kgo.GzipCompression(), kgo.NoCompression()))
	}
	tc, err := k.TLS.ClientConfig("kafka")
	if err != nil {
		return nil, err
	}
	if tc != nil {
		opts = append(opts, kgo.Dialer((&tls.Dialer{NetDialer: &net.Dialer{Timeout: 10 * time.Second}, Config: tc}).DialContext))
	}
	s := k.SASL
	switch s.Mechanism {
	case "":
	case "PLAIN":
		opts = append(opts, kgo.SASL(plain.Auth{User: s.Username, Pass: s.Password}.AsMechanism()))
	case "SCRAM-SHA-256":
		opts = append(opts, kgo.SASL(scram.Auth{User: s.Username, Pass: s.Password}.AsSha256Mechanism()))
	case "SCRAM-SHA-512":
		opts = append(opts, kgo.SASL(scram.Auth{User: s.Username, Pass: s.Password}.AsSha512Mechanism()))
	}
	return opts, nil
}

// ClientConfig builds a client TLS config, or nil when TLS is off. key
// names the section in errors (kafka, elasticsearch).
func (c TLS) ClientConfig(key string) (*tls.Config, error) {
	if !c.Enabled {
		return nil, nil
	}
	tc := &tls.Config{InsecureSkipVerify: c.InsecureSkipVerify, MinVersion: tls.VersionTLS12}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("%s.tls.ca_file: %w", key, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s.tls.ca_file: %s holds no PEM certificate", key, c.CAFile)
		}
		tc.RootCAs = pool
	}
	if c.CertFile != "" || c.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("%s.tls.cert_file/key_file: %w", key, err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// TLSHint says which setting to check when err is a TLS connection that
// failed on the client's side: the server's certificate is not signed by
// the configured CA, names another host, is expired, or the port does not
// speak TLS at all. section is the client's config section (kafka,
// elasticsearch, opensearch), addrKey the key of its addresses
// (kafka.brokers, elasticsearch.urls). It returns "" for other errors.
// PostgreSQL's TLS settings live in its DSN: see postgres.dsn's hints in
// cmd/decant.
func TLSHint(section, addrKey string, err error) string {
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	var record tls.RecordHeaderError
	msg := err.Error()
	switch {
	case errors.As(err, &unknown) || strings.Contains(msg, "certificate signed by unknown authority"):
		return fmt.Sprintf("check %s.tls.ca_file: it must hold the CA that signed the server's certificate", section)
	case errors.As(err, &host) || strings.Contains(msg, "certificate is valid for"):
		return fmt.Sprintf("check %s: each host must be a name or IP the server's certificate lists", addrKey)
	case errors.As(err, &invalid):
		return fmt.Sprintf("check the server's certificate (%v), or %s.tls.ca_file", invalid.Reason, section)
	case errors.As(err, &record) || strings.Contains(msg, "server gave HTTP response to HTTPS client") ||
		strings.Contains(msg, "first record does not look like a TLS handshake"):
		return fmt.Sprintf("check %s: that port does not speak TLS; use the server's TLS port", addrKey)
	}
	return ""
}

// NewLogger builds the structured logger the log section asks for,
// writing to w.
func (l Log) NewLogger(w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(l.Level))
	opts := &slog.HandlerOptions{Level: level}
	if l.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
