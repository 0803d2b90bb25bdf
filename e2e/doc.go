// Package e2e holds the tests of the whole pipeline against real
// PostgreSQL, Kafka and Elasticsearch servers (started by `make infra-up`).
// Helpers live in internal/testenv; the server scripts in e2e/infra.
package e2e
