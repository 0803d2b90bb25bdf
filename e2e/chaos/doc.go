// Package chaos holds TestChaos, the reliability test of PRODUCT.md §6
// (issue 7): a randomized workload on a shop schema runs while a fault
// schedule kills (-9) and restarts decant's stage processes, restarts the
// Kafka broker, the Elasticsearch node and PostgreSQL (fast shutdown), and
// forces consumer group rebalances. Once the workload stops and the last
// fault has healed, a validator compares every aggregate document in
// Elasticsearch and the last record per key of every aggregate topic with
// an oracle query written in the test, and every raw topic's last record
// per key with its table. It prints one line:
//
//	CHAOS operations=N faults=N (kill9=…, kafka=…, es=…, pg=…, rebalance=…, pause=…) duplicates=N mismatches=N converge=…s
//
// and fails when mismatches > 0.
//
// The test restarts real servers through e2e/infra/{kafka,es,pg}.sh, so it
// must run against servers those scripts own. It derives the scripts'
// environment from the servers the tests use (DECANT_TEST_PG_DSN,
// DECANT_TEST_KAFKA_BROKERS, DECANT_TEST_ES_URL and their defaults) and
// from DECANT_INFRA_DIR (default /tmp/decant-infra), and refuses to start
// when the instance under DECANT_INFRA_DIR is not the one the tests point
// at: it never restarts servers it was not asked to test. Under `make test`
// (default environment) it restarts the default servers, which is safe
// because packages run one at a time (-p 1).
//
// Sizes: the default (part of `make test`) runs in under 5 minutes;
// DECANT_HEAVY=1 runs at least 50,000 operations and 30 faults. Knobs:
// DECANT_CHAOS_OPS, DECANT_CHAOS_RATE (operations per second),
// DECANT_CHAOS_SEED, DECANT_CHAOS_SUMMARY (a file the summary line is
// appended to), DECANT_CHAOS_KEEP_LOGS=1 (keep the stage processes' logs).
package chaos
