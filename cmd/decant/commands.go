package main

// commands is every subcommand by name: its one-line summary (decant
// --help lists them sorted), its positional arguments and its flags
// function. Each body is in cmd_<name>.go, each --help text in
// help/<name>.txt.
var commands = map[string]command{}

func init() {
	for _, c := range []command{
		{name: "backfill", summary: "rebuild every document of an aggregate (--reindex: into a new index)",
			nargs: 1, hint: "name one aggregate, e.g. decant backfill customer", flags: backfillFlags},
		{name: "build", summary: "run the build stage: refs → documents → aggregate topics and Elasticsearch",
			flags: noFlags(stageCommand("build", "build stage stopped", newBuildStage))},
		{name: "check", summary: "check config and mappings against the live database",
			flags: boolFlag("json", "print the report as JSON", checkReport)},
		{name: "explain", summary: "print the generated SQL of an aggregate (build and routes)",
			nargs: 1, hint: "name one aggregate, e.g. decant explain customer",
			flags: boolFlag("index", "print the Elasticsearch index settings and mapping", explain)},
		{name: "init", summary: "write a starting mapping from the database's foreign keys",
			flags: initFlags},
		{name: "map", summary: "run the map stage: raw changes → refs of affected aggregates",
			flags: noFlags(stageCommand("map", "map stage stopped", newMapStage))},
		{name: "preview", summary: "print the document of one aggregate id as it would be indexed",
			nargs: 2, hint: `give an aggregate and an id, e.g. decant preview customer '{"id":7}'`, flags: noFlags(preview)},
		{name: "run", summary: "run every stage (stream, map, build, index) in one process",
			flags: boolFlag("no-backfill", "do not build every document of an aggregate that has none yet", runAll)},
		{name: "serve", summary: "serve the HTTP port (pipeline page, /v1/wait, /metrics) without running a stage",
			flags: noFlags(serve)},
		{name: "snapshot", summary: "snapshot one table again while every table keeps streaming",
			nargs: 1, hint: "name one table, e.g. decant snapshot public.orders", flags: snapshotFlags},
		{name: "status", summary: "show slot lag, stage lag, watermarks, DLQ counts and documents",
			nargs: -1, flags: boolFlag("json", "print JSON for scripts", status)},
		{name: "stream", summary: "stream committed row changes from PostgreSQL into Kafka raw topics",
			nargs: -1, flags: noFlags(stageCommand("stream", "streamer stopped", newStreamStage))},
		{name: "wait", summary: "block until a WAL position is reflected in every sink",
			nargs: -1, flags: waitFlags},
	} {
		commands[c.name] = c
	}
}
