package config

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
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

// Regression: "none", the default, left franz-go's own default in place,
// so every batch decant produced was snappy-compressed although the docs
// (and the reason given there: the CPU of the producer, broker and
// consumer) say none. Each setting is produced through kfake and read
// back with the compression codec of its batch.
func TestClientOptionsCompression(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "c"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// franz-go's codes for a batch's compression (kgo.RecordAttrs).
	want := map[string]uint8{"none": 0, "": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, name := range []string{"none", "", "snappy", "lz4", "zstd", "gzip"} {
		opts, err := (Kafka{Brokers: c.ListenAddrs(), Compression: name}).ClientOptions()
		if err != nil {
			t.Fatal(err)
		}
		cl, err := kgo.NewClient(append(opts, kgo.DefaultProduceTopic("c"))...)
		if err != nil {
			t.Fatal(err)
		}
		r := cl.ProduceSync(ctx, &kgo.Record{Key: []byte(name), Value: bytes.Repeat([]byte("compressible "), 100)})
		cl.Close()
		if err := r.FirstErr(); err != nil {
			t.Fatal(err)
		}
		offset := r[0].Record.Offset
		read, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"c": {0: kgo.NewOffset().At(offset)}}))
		if err != nil {
			t.Fatal(err)
		}
		fs := read.PollRecords(ctx, 1)
		read.Close()
		if err := fs.Err0(); err != nil {
			t.Fatal(err)
		}
		recs := fs.Records()
		if len(recs) == 0 {
			t.Fatalf("compression %q: record not read back", name)
		}
		if got := recs[0].Attrs.CompressionType(); got != want[name] {
			t.Errorf("compression %q: the batch is compressed with codec %d, want %d", name, got, want[name])
		}
	}
}
