// Command decant keeps search indexes and downstream services in sync with a
// normalized PostgreSQL database. See README.md and docs/.
//
// This package is wiring only: each subcommand parses its flags, loads the
// config and calls into the stage packages. Its --help text is
// help/<command>.txt.
package main

import (
	"cmp"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/decant-cdc/decant/internal/lazyfree"
)

// command is one subcommand. run parses its flags and positional
// arguments, then calls the body its flags function returned.
type command struct {
	name, summary string
	// nargs is how many positional arguments it takes; -1 ignores them.
	nargs int
	// hint is printed when the count is wrong; "" names the first
	// unexpected argument.
	hint string
	// flags adds the command's own flags (--config is shared) and returns
	// its body, which returns the process exit status.
	flags func(fs *flag.FlagSet) func(ctx context.Context, c *call) int
}

// call is one invocation of a command, its flags parsed.
type call struct {
	name, configPath string
	args             []string
	stdout, stderr   io.Writer
}

func main() {
	// First, before any goroutine or file of decant's own: the program may
	// start again here, in the same process.
	lazyfree.Ensure()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(runMain(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func runMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stdout)
		return 0
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "decant: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	return c.run(ctx, args[1:], stdout, stderr)
}

// help holds the --help text of every command (help/<command>.txt) and of
// decant itself (help/decant.txt): prose, kept apart from the wiring.
//
//go:embed help/*.txt
var help embed.FS

func helpText(name string) string {
	b, _ := help.ReadFile("help/" + name + ".txt")
	return string(b)
}

func usage(w io.Writer) {
	var list strings.Builder
	for _, n := range slices.Sorted(maps.Keys(commands)) {
		fmt.Fprintf(&list, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprint(w, strings.Replace(helpText("decant"), "{{commands}}", list.String(), 1))
}

// run parses args, allowing flags after positional arguments, and runs
// the command. --config defaults to $DECANT_CONFIG, else decant.yaml.
func (c command) run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), helpText(c.name))
		fs.PrintDefaults()
	}
	configPath := fs.String("config", cmp.Or(os.Getenv("DECANT_CONFIG"), "decant.yaml"), "config file (env DECANT_CONFIG)")
	body := c.flags(fs)
	var pos []string
	for {
		if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
			return 0
		} else if err != nil {
			return 2
		}
		if args = fs.Args(); len(args) == 0 {
			break
		}
		pos, args = append(pos, args[0]), args[1:]
	}
	if c.nargs >= 0 && len(pos) != c.nargs {
		if c.hint == "" {
			fmt.Fprintf(stderr, "decant %s: unexpected argument %q\n", c.name, pos[c.nargs])
		} else {
			fmt.Fprintf(stderr, "decant %s: %s\n", c.name, c.hint)
		}
		return 2
	}
	return body(ctx, &call{name: c.name, configPath: *configPath, args: pos, stdout: stdout, stderr: stderr})
}

// noFlags is the flags function of a command with only --config.
func noFlags(body func(ctx context.Context, c *call) int) func(*flag.FlagSet) func(context.Context, *call) int {
	return func(*flag.FlagSet) func(context.Context, *call) int { return body }
}

// boolFlag is the flags function of a command whose one flag besides
// --config is the bool --name (default false); body gets its value.
func boolFlag(name, usage string, body func(ctx context.Context, c *call, set bool) int) func(*flag.FlagSet) func(context.Context, *call) int {
	return func(fs *flag.FlagSet) func(context.Context, *call) int {
		set := fs.Bool(name, false, usage)
		return func(ctx context.Context, c *call) int { return body(ctx, c, *set) }
	}
}

// fail prints "decant <command>: <err>" and returns the exit status code.
func (c *call) fail(code int, err error) int {
	fmt.Fprintf(c.stderr, "decant %s: %v\n", c.name, err)
	return code
}

// writeJSON writes v as indented JSON, for scripts.
func writeJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
