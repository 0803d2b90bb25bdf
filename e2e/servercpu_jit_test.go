package e2e

import (
	"testing"

	"github.com/decant-cdc/decant/internal/testenv"
)

// TestReadJITCPU checks what the documents benchmarks' warm-up relies on:
// readJITCPU finds the compiler threads of the running Kafka and
// Elasticsearch JVMs (every JVM compiles from its start, so each has spent
// some CPU on it), and a thread's name that is not a compiler's is not
// counted.
func TestReadJITCPU(t *testing.T) {
	testenv.Kafka(t)
	testenv.Elasticsearch(t)
	jit := readJITCPU()
	for _, name := range []string{"kafka", "es"} {
		if jit[name] <= 0 {
			t.Errorf("readJITCPU()[%q] = %v, want the CPU-seconds of its JVM's compiler threads (> 0); all: %v", name, jit[name], jit)
		}
		if all := readServerCPU()[name]; jit[name] > all {
			t.Errorf("%s: the compilers' %v CPU-seconds exceed the whole JVM's %v", name, jit[name], all)
		}
	}
	for comm, want := range map[string]bool{
		"C2 CompilerThre":   true,
		"C1 CompilerThre\n": true,
		"G1 Conc#0":         false,
		"kafka-1-metadat":   false,
		"elasticsearch[d":   false,
	} {
		if got := isJITThread(comm); got != want {
			t.Errorf("isJITThread(%q) = %v, want %v", comm, got, want)
		}
	}
}
