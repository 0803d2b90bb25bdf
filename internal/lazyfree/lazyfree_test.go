package lazyfree

import (
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestEnv(t *testing.T) {
	for _, c := range []struct {
		name    string
		env     []string
		want    []string
		changed bool
	}{
		{"no GODEBUG", []string{"A=1"}, []string{"A=1", "GODEBUG=madvdontneed=0"}, true},
		{"empty GODEBUG", []string{"GODEBUG=", "A=1"}, []string{"A=1", "GODEBUG=madvdontneed=0"}, true},
		{"other settings kept", []string{"GODEBUG=gctrace=1", "A=1"}, []string{"A=1", "GODEBUG=gctrace=1,madvdontneed=0"}, true},
		{"the user's choice", []string{"GODEBUG=gctrace=1,madvdontneed=1"}, []string{"GODEBUG=gctrace=1,madvdontneed=1"}, false},
		{"already set", []string{"GODEBUG=madvdontneed=0"}, []string{"GODEBUG=madvdontneed=0"}, false},
		{"a prefix is not the setting", []string{"GODEBUG=xmadvdontneed=1"}, []string{"GODEBUG=xmadvdontneed=1,madvdontneed=0"}, true},
	} {
		got, changed := Env(c.env)
		if !slices.Equal(got, c.want) || changed != c.changed {
			t.Errorf("%s: Env(%q) = %q, %v; want %q, %v", c.name, c.env, got, changed, c.want, c.changed)
		}
	}
}

// TestEnsure runs this test binary as a child that calls Ensure and prints
// its pid before and after, and GODEBUG: on Linux the program runs again,
// in the same process, with the setting, unless GODEBUG names it already;
// elsewhere it runs on unchanged.
func TestEnsure(t *testing.T) {
	if os.Getenv("LAZYFREE_CHILD") != "" {
		before := os.Getenv("LAZYFREE_PID")
		if before == "" {
			before = strconv.Itoa(os.Getpid())
			os.Setenv("LAZYFREE_PID", before) // carried through the exec
		}
		Ensure()
		os.Stdout.WriteString(before + " " + strconv.Itoa(os.Getpid()) + " " + os.Getenv("GODEBUG") + "\n")
		os.Exit(0)
	}
	for _, c := range []struct{ godebug, want string }{
		{"", "madvdontneed=0"},
		{"gctrace=0", "gctrace=0,madvdontneed=0"},
		{"madvdontneed=1", "madvdontneed=1"},
	} {
		if runtime.GOOS != "linux" {
			c.want = c.godebug // Ensure changes nothing outside Linux
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestEnsure$")
		cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool {
			return strings.HasPrefix(kv, "GODEBUG=") || strings.HasPrefix(kv, "LAZYFREE_")
		}), "LAZYFREE_CHILD=1", "GODEBUG="+c.godebug)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("GODEBUG=%q: child: %v", c.godebug, err)
		}
		f := strings.Fields(string(out))
		if len(f) != 3 || f[0] != f[1] || f[2] != c.want {
			t.Errorf("GODEBUG=%q: child printed %q; want its pid twice, then GODEBUG %q", c.godebug, out, c.want)
		}
	}
}
