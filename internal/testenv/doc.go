// Package testenv is the one test environment of decant. Unit tests of a
// stage (streamer, mappings, cmd/decant) and every e2e package import it,
// which is why it lives outside e2e/. It gives tests real servers: a fresh
// PostgreSQL database, a Kafka topic prefix and an Elasticsearch index
// prefix per test, plus wait helpers that name what they wait for. It also
// owns what tests of whole pipelines share:
//
//   - Decant builds ./cmd/decant once per `go test` process (call
//     RemoveDecant from TestMain); DecantCmd and Start run it as a child
//     process whose output goes to a log file (Proc: Term, Kill, Tail,
//     PeakRSS).
//   - StartChild re-runs the test binary as a child (ChildEnv carries its
//     spec), so that a test can kill -9 in-process stage code.
//   - Pipeline writes decant.yaml and a mapping over the three servers;
//     Index compares an alias with an oracle query (ESDocs, Oracle,
//     Mismatches, WaitConverged).
//   - GroupLag, KafkaEnv.Records, ESHits, ESRequest, FreePort, Get, Median.
//
// The servers are the ones `make infra-up` starts (see e2e/infra/). Their
// addresses come from the environment:
//
//	DECANT_TEST_PG_DSN        default postgres://postgres@127.0.0.1:55432/postgres?sslmode=disable
//	DECANT_PG_VERSION         15 (default), 16, 17 or 18: without DECANT_TEST_PG_DSN the
//	                          port is 554<major> (55416…), as e2e/infra/pg.sh starts it,
//	                          and testenv.Postgres fails when the server is another major
//	DECANT_PG_PORT            the port, when the server is not on its version's default
//	DECANT_TEST_PG_STANDBY_DSN the hot standby of Standby; default port 555<major>
//	                          (DECANT_PG_STANDBY_PORT) on 16+, none on 15
//	DECANT_TEST_KAFKA_BROKERS default 127.0.0.1:59092
//	DECANT_TEST_ES_URL        default http://127.0.0.1:59200
//	DECANT_TEST_OS_URL        default http://127.0.0.1:59201 (OpenSearch, OSURL)
//
// When a server is unreachable a test fails under CI=true (a missing server
// must never turn a red run green) and is skipped otherwise, so `go test
// ./...` on a laptop without servers still runs the pure tests. With
// `go test -short` every server test is skipped on purpose: that is the
// unit-test phase of `make test`.
//
//	func TestSomething(t *testing.T) {
//		pg := testenv.Postgres(t)       // fresh database, dropped at cleanup
//		k := testenv.Kafka(t)           // unique topic prefix, topics deleted at cleanup
//		es := testenv.Elasticsearch(t)  // unique index prefix, indexes deleted at cleanup
//		testenv.WaitFor(t, "document indexed", 30*time.Second, func() (bool, error) { … })
//	}
//
//	func TestBinary(t *testing.T) {
//		p := testenv.NewPipeline(t, spec)      // database, topics, index, decant.yaml
//		run := p.Start("run", nil, "run")       // decant run --config …, killed at cleanup
//		p.WaitConverged(time.Minute)            // Elasticsearch equals the oracle
//		run.Term(time.Minute)
//	}
package testenv
