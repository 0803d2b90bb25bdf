// Command decant keeps search indexes and downstream services in sync with a
// normalized PostgreSQL database. See README.md and docs/.
//
// This package is wiring only: each subcommand parses its flags, loads the
// config and calls into the stage packages.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"
)

// command is one subcommand. run returns the process exit status.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

// commands is filled by the init functions of the cmd_*.go files.
var commands = map[string]command{}

func register(name, summary string, run func(ctx context.Context, args []string, stdout, stderr io.Writer) int) {
	commands[name] = command{summary: summary, run: run}
}

func main() {
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

func usage(w io.Writer) {
	fmt.Fprint(w, `decant streams PostgreSQL changes into Kafka and keeps denormalized documents
in Kafka aggregate topics and Elasticsearch in sync with the database.

Usage: decant <command> [flags]

Commands:
`)
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprint(w, `
Examples:
  decant check --config decant.yaml        # validate config and mappings against the database
  decant run --config decant.yaml          # run every stage in one process
  decant preview customer '{"id":7}'       # print one document as it would be indexed

Run 'decant <command> --help' for a command's flags. Docs: docs/README.md
`)
}

// configFlag adds the --config flag every subcommand shares.
func configFlag(fs *flag.FlagSet) *string {
	def := os.Getenv("DECANT_CONFIG")
	if def == "" {
		def = "decant.yaml"
	}
	return fs.String("config", def, "config file (env DECANT_CONFIG)")
}

// parseFlags parses args, allowing flags after positional arguments. It
// returns the positional arguments, or an exit status when it should stop.
func parseFlags(fs *flag.FlagSet, args []string) ([]string, int, bool) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, 0, false
			}
			return nil, 2, false
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, 0, true
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

func newFlagSet(name, help string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), help)
		fs.PrintDefaults()
	}
	return fs
}

// wantArgs reports whether pos holds n positional arguments. Otherwise it
// prints hint, or names the first unexpected argument when hint is "".
func wantArgs(stderr io.Writer, name string, pos []string, n int, hint string) bool {
	switch {
	case len(pos) == n:
		return true
	case hint == "":
		fmt.Fprintf(stderr, "decant %s: unexpected argument %q\n", name, pos[n])
	default:
		fmt.Fprintf(stderr, "decant %s: %s\n", name, hint)
	}
	return false
}

// fail prints "decant <name>: <err>" and returns the exit status code.
func fail(stderr io.Writer, name string, code int, err error) int {
	fmt.Fprintf(stderr, "decant %s: %v\n", name, err)
	return code
}
