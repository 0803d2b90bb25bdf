// Command benchreport turns the "BENCH …" lines that the benchmarks print
// into one table and one JSON report (make bench). It reads the benchmark
// output (files named on the command line, or stdin), keeps the last line
// of each benchmark, prints the table — each stage's decant figure, its
// ceiling (the same work done by the simplest tool that can do it on the
// same machine and servers, in the same run) and their ratio — and writes
// the JSON report. It exits 1 when a benchmark's line is missing.
//
//	go run ./e2e/benchreport -json bench-report.json /tmp/decant-bench.log
//	go run ./e2e/benchreport -markdown /tmp/decant-bench.log   # the table for docs/performance.md
//
// A BENCH line is "BENCH <name> key=value …": a value is a number,
// optionally followed by a unit (decant=40048 rows/s), or a word.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// line is one parsed BENCH line.
type line struct {
	Name   string             `json:"name"`
	Values map[string]float64 `json:"values"`
	Words  map[string]string  `json:"words,omitempty"`
	Text   string             `json:"line"`
}

// row is one line of the report.
type row struct {
	Stage       string   `json:"stage"`
	Workload    string   `json:"workload"`
	Decant      float64  `json:"decant"`
	Unit        string   `json:"unit"`
	Ceiling     *float64 `json:"ceiling,omitempty"`
	CeilingName string   `json:"ceiling_name,omitempty"`
	Ratio       *float64 `json:"ratio,omitempty"`
	Missing     bool     `json:"missing,omitempty"`
}

// report is the JSON document written by -json.
type report struct {
	GeneratedAt time.Time `json:"generated_at"`
	Host        struct {
		CPUs int    `json:"cpus"`
		OS   string `json:"os"`
		Arch string `json:"arch"`
	} `json:"host"`
	Rows  []row  `json:"rows"`
	Lines []line `json:"lines"`
}

var (
	keyValue = regexp.MustCompile(`^([a-z][a-z0-9_]*)=(\S+)$`)
	number   = regexp.MustCompile(`^-?[0-9]+(\.[0-9]+)?`)
)

// parse parses "BENCH <name> key=value [unit] …".
func parse(text string) (line, bool) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(text), "BENCH ")
	if !ok {
		return line{}, false
	}
	l := line{Values: map[string]float64{}, Words: map[string]string{}, Text: strings.TrimSpace(text)}
	var name []string
	for _, tok := range strings.Fields(rest) {
		m := keyValue.FindStringSubmatch(tok)
		if m == nil {
			if len(l.Values)+len(l.Words) == 0 {
				name = append(name, tok)
			}
			continue // a unit or a parenthesized detail
		}
		if n := number.FindString(m[2]); n != "" {
			v, _ := strconv.ParseFloat(n, 64)
			l.Values[m[1]] = v
		} else {
			l.Words[m[1]] = m[2]
		}
	}
	l.Name = strings.Join(name, " ")
	return l, l.Name != ""
}

// stage says how one benchmark's line becomes rows of the report.
type stage struct {
	bench string // the BENCH line's name
	stage string // the stage it measures, for a missing line
	rows  func(l line) []row
}

func ratioRow(stageName, workload, unit, ceilingName, decantKey, ceilingKey string) func(line) []row {
	return ratioRowKey(stageName, workload, unit, ceilingName, decantKey, ceilingKey, "ratio")
}

// ratioRowKey is ratioRow with the line's ratio under ratioKey.
func ratioRowKey(stageName, workload, unit, ceilingName, decantKey, ceilingKey, ratioKey string) func(line) []row {
	return func(l line) []row {
		r := row{Stage: stageName, Workload: workload, Decant: l.Values[decantKey], Unit: unit, CeilingName: ceilingName}
		if c, ok := l.Values[ceilingKey]; ok {
			r.Ceiling = &c
			if ratio, ok := l.Values[ratioKey]; ok {
				r.Ratio = &ratio
			} else if c > 0 {
				ratio := r.Decant / c
				r.Ratio = &ratio
			}
		}
		if strings.Contains(workload, "%") {
			r.Workload = fmt.Sprintf(workload, count(l))
		}
		return []row{r}
	}
}

// count is the size of a benchmark's workload.
func count(l line) string {
	for _, k := range []string{"rows", "aggregates", "docs", "changes"} {
		if v, ok := l.Values[k]; ok {
			return human(v)
		}
	}
	return "?"
}

// streamRows are the two rows of a stream benchmark: against the faster
// of pg_recvlogical with decant's options and a Go reader discarding what
// it reads (PostgreSQL's decoding alone, which sends a large transaction
// before it commits; older logs: pg_recvlogical alone) and against
// pg_recvlogical with pgoutput's defaults (the committed transactions).
func streamRows(workload string) func(line) []row {
	on := ratioRowKey("stream", workload, "rows/s", "pg_recvlogical to /dev/null, streaming on", "decant", "pg_recvlogical", "ratio")
	faster := ratioRowKey("stream", workload, "rows/s", "the faster of pg_recvlogical (streaming on) and a Go reader, both discarding", "decant", "ceiling", "ratio")
	off := ratioRowKey("stream", workload, "rows/s", "pg_recvlogical to /dev/null, committed (protocol 1)", "decant", "pg_recvlogical_committed", "ratio_committed")
	return func(l line) []row {
		rows := on(l)
		if _, ok := l.Values["ceiling"]; ok {
			rows = faster(l)
		}
		if _, ok := l.Values["pg_recvlogical_committed"]; ok {
			rows = append(rows, off(l)...)
		}
		return rows
	}
}

var stages = []stage{
	{"stream one large transaction", "stream", streamRows("1 transaction of %s rows")},
	{"stream small transactions", "stream", streamRows("%s rows in transactions of 10")},
	{"build", "build", ratioRow("build", "%s aggregates", "docs/s", "COPY (build SQL) TO STDOUT", "decant", "copy")},
	{"index", "elasticsearch sink", ratioRow("elasticsearch sink", "%s documents", "docs/s", "direct _bulk load", "decant", "direct_bulk")},
	{"index opensearch", "opensearch sink", ratioRow("opensearch sink", "%s documents", "docs/s", "direct _bulk load", "decant", "direct_bulk")},
	{"backfill", "backfill end to end", ratioRow("backfill end to end", "%s aggregates", "docs/s", "direct _bulk load", "decant", "direct_bulk")},
	{"fencing", "fenced build stage", ratioRow("fenced build stage", "%s aggregates, aggregate topic only", "docs/s", "the same unfenced", "fenced", "unfenced")},
	{"freshness", "freshness", func(l line) []row {
		rate := fmt.Sprintf("at %.0f changes/s", l.Values["rate"])
		if l.Words["rate_is"] == "half_max" {
			rate += " (half the maximum)"
		}
		fresh := "commit → searchable " + rate
		if l.Words["sustained"] == "no" {
			fresh += fmt.Sprintf(", NOT sustained: median grew from %.0f to %.0f ms", l.Values["p50_first_quarter"], l.Values["p50_last_quarter"])
		}
		return []row{
			{Stage: "max change rate", Workload: "single-row transactions, distinct documents", Decant: l.Values["max_rate"], Unit: "changes/s"},
			{Stage: "freshness p50", Workload: fresh, Decant: l.Values["p50"], Unit: "ms"},
			{Stage: "freshness p99", Workload: fresh, Decant: l.Values["p99"], Unit: "ms"},
			{Stage: "freshness p50", Workload: "commit → aggregate topic " + rate, Decant: l.Values["agg_topic_p50"], Unit: "ms"},
			{Stage: "freshness p99", Workload: "commit → aggregate topic " + rate, Decant: l.Values["agg_topic_p99"], Unit: "ms"},
			{Stage: "CPU", Workload: "decant run, " + rate, Decant: l.Values["cpu"], Unit: "s/1k changes"},
			{Stage: "CPU", Workload: "decant run, at the maximum rate", Decant: l.Values["cpu_max_rate"], Unit: "s/1k changes"},
			{Stage: "peak RSS", Workload: "decant run, whole benchmark", Decant: l.Values["peak_rss"], Unit: "MB"},
		}
	}},
	{"initial load", "initial load", ratioRow("initial load", "decant run from nothing, %s documents (demo shop)", "docs/s", "raw snapshot ‖ direct _bulk load, best of grid", "decant", "ceiling")},
	{"live backlog", "live backlog", func(l line) []row {
		rows := ratioRow("live backlog", "%s changes to distinct documents, decant paused then resumed", "docs/s", "direct _bulk load replacing the documents in a copy of the index, best of grid", "decant", "direct_bulk")(l)
		if _, ok := l.Values["fresh_bulk"]; ok {
			rows = append(rows, ratioRowKey("live backlog", "%s changes to distinct documents, decant paused then resumed", "docs/s", "direct _bulk load into a fresh index, best of grid (for comparison)", "decant", "fresh_bulk", "ratio_fresh")(l)...)
		}
		return rows
	}},
	{"kafka sink only", "backfill, Kafka sink only", ratioRow("backfill, Kafka sink only", "decant backfill of %s documents while decant run runs, elasticsearch.urls: []", "docs/s", "COPY (build SQL) TO STDOUT, 4 connections", "decant", "copy")},
}

func main() {
	jsonPath := flag.String("json", "", "write the report as JSON to this file")
	markdown := flag.Bool("markdown", false, "print the table as Markdown (for docs/performance.md)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "Usage: benchreport [-json FILE] [-markdown] [benchmark output files…]\n\nReads the BENCH lines of the benchmarks (stdin when no file is named),\nprints the table and writes the JSON report.\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	var in []io.Reader
	for _, p := range flag.Args() {
		f, err := os.Open(p)
		if err != nil {
			fmt.Fprintf(os.Stderr, "benchreport: %v\n", err)
			os.Exit(2)
		}
		defer f.Close()
		in = append(in, f)
	}
	if len(in) == 0 {
		in = append(in, os.Stdin)
	}
	last := map[string]line{}
	var order []string
	sc := bufio.NewScanner(io.MultiReader(in...))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l, ok := parse(sc.Text())
		if !ok {
			continue
		}
		if _, seen := last[l.Name]; !seen {
			order = append(order, l.Name)
		}
		last[l.Name] = l
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintf(os.Stderr, "benchreport: %v\n", err)
		os.Exit(2)
	}

	var rep report
	rep.GeneratedAt = time.Now().UTC().Truncate(time.Second)
	rep.Host.CPUs, rep.Host.OS, rep.Host.Arch = runtime.NumCPU(), runtime.GOOS, runtime.GOARCH
	missing := 0
	for _, s := range stages {
		l, ok := last[s.bench]
		if !ok {
			missing++
			rep.Rows = append(rep.Rows, row{Stage: s.stage, Workload: "no \"BENCH " + s.bench + "\" line: the benchmark failed or did not run", Missing: true})
			continue
		}
		rep.Rows = append(rep.Rows, s.rows(l)...)
	}
	for _, name := range order {
		rep.Lines = append(rep.Lines, last[name])
	}

	cells := [][]string{{"stage", "workload", "decant", "ceiling", "ratio"}}
	for _, r := range rep.Rows {
		if r.Missing {
			cells = append(cells, []string{r.Stage, r.Workload, "-", "-", "-"})
			continue
		}
		ceiling, ratio := "-", "-"
		if r.Ceiling != nil {
			ceiling = fmt.Sprintf("%s %s (%s)", human(*r.Ceiling), r.Unit, r.CeilingName)
		}
		if r.Ratio != nil {
			ratio = fmt.Sprintf("%.2f", *r.Ratio)
		}
		cells = append(cells, []string{r.Stage, r.Workload, human(r.Decant) + " " + r.Unit, ceiling, ratio})
	}
	if *markdown {
		for i, c := range cells {
			fmt.Println("| " + strings.Join(c, " | ") + " |")
			if i == 0 {
				fmt.Println("|---|---|---:|---:|---:|")
			}
		}
	} else {
		tw := tabwriter.NewWriter(os.Stdout, 2, 8, 2, ' ', 0)
		for i, c := range cells {
			if i == 0 {
				c = []string{"STAGE", "WORKLOAD", "DECANT", "CEILING", "RATIO"}
			}
			fmt.Fprintln(tw, strings.Join(c, "\t"))
		}
		tw.Flush()
	}
	if *jsonPath != "" {
		b, _ := json.MarshalIndent(rep, "", "  ")
		if err := os.WriteFile(*jsonPath, append(b, '\n'), 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "benchreport: %v\n", err)
			os.Exit(2)
		}
		fmt.Printf("\nwritten to %s\n", *jsonPath)
	}
	if missing > 0 {
		fmt.Fprintf(os.Stderr, "benchreport: %d benchmark(s) printed no BENCH line\n", missing)
		os.Exit(1)
	}
}

// human formats v with thousands separators, or three decimals below 10.
func human(v float64) string {
	if v < 10 && v != float64(int64(v)) {
		return strconv.FormatFloat(v, 'f', 3, 64)
	}
	s := strconv.FormatInt(int64(v+0.5), 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
