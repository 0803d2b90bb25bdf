// Package config loads decant.yaml: one YAML file whose every key can be
// overridden by an environment variable named after its path
// (postgres.dsn → DECANT_POSTGRES_DSN, kafka.brokers → DECANT_KAFKA_BROKERS,
// lists comma-separated).
//
// Loading is strict and happens before any side effect: unknown keys, wrong
// types and invalid values are all reported at once, each with
// file:line:column, the key's path and what to change. Secrets (passwords,
// API keys, DSN passwords) are never printed: use Config.Redacted for logs.
package config
