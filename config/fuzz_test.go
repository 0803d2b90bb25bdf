package config

import "testing"

// FuzzParse: the config parser never panics, whatever the bytes.
// Run: go test ./config -run='^$' -fuzz=FuzzParse -fuzztime=1m
func FuzzParse(f *testing.F) {
	f.Add([]byte("postgres:\n  dsn: postgres://db/shop\nkafka:\n  brokers: [k:9092]\n"))
	f.Add([]byte("kafka: [a, {b: c}]\nstreamer:\n  status_interval: 1s\n"))
	f.Add([]byte("a: &x {b: *x}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg := Default()
		_ = Parse("fuzz.yaml", data, &cfg)
	})
}
