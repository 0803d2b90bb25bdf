// Command decant keeps search indexes and downstream services in sync with a
// normalized PostgreSQL database. See README.md and docs/.
//
// This package is wiring only: each subcommand parses its flags, loads the
// config and calls into the stage packages.
package main

import (
	"context"
	"embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
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
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	var list strings.Builder
	for _, n := range names {
		fmt.Fprintf(&list, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprint(w, strings.Replace(helpText("decant"), "{{commands}}", list.String(), 1))
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

// newFlagSet is the flag set of a command; -h prints help/<name>.txt and
// the flags.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), helpText(name))
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
