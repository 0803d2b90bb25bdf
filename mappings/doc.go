// Package mappings turns the users' YAML mapping files into a validated
// model of aggregates and into the SQL that the resolver runs. It owns the
// mapping format (docs/mappings.md, PRODUCT.md §3) and nothing else: it
// reads no Kafka, writes no documents.
//
// # Three steps
//
//  1. Load parses mapping files with yaml.v3 nodes into a Set. It needs no
//     database. Every problem — unknown keys (with the closest valid key),
//     wrong types, missing tables, ambiguous joins, duplicate names across
//     files, too deep nesting — is collected into one ErrorList; each
//     *Error carries file:line:column and the key path, for example
//     "shop.yaml:8:9: aggregates.customer.relations.orders.foriegn_key:
//     unknown key "foriegn_key"; did you mean "foreign_key"?".
//  2. Bind resolves a Set against a Catalog (tables, columns, keys, foreign
//     keys, indexes, replica identities) and fills in the defaults: id =
//     primary key, columns = all columns in table order, the other side of
//     each join from the foreign key constraint or else the primary key.
//     Unknown tables and columns and join columns of incompatible types are
//     errors with positions and suggestions, like Load's.
//  3. The resulting Model is immutable. Each Aggregate carries its Build
//     query and its Routes; Model.RoutesFor gives the routes of a changed
//     table, Aggregate.IndexMapping the Elasticsearch mapping.
//
// ReadCatalog and ReadCheckEnv are the only functions that do I/O: they run
// catalog queries through a Querier (*pgx.Conn, *pgxpool.Pool). Everything
// else is pure and tested with hand-written catalogs and golden files
// (testdata/; rewrite them with `go test ./mappings -update`).
//
// # Guarantees
//
//   - The SQL is generated once, at Bind. Every identifier is quoted with
//     pgx.Identifier.Sanitize; every value is a parameter. Document keys are
//     string literals that mean the same whatever standard_conforming_strings is.
//   - Build is one statement per batch of ids: for each id that exists it
//     returns the id columns as jsonb (to_jsonb, in id order) and the whole
//     nested document as the json column doc (json, not jsonb: it builds
//     faster; keys keep the mapping's order); a missing id returns no row,
//     which the caller treats as a deletion. Arrays are ordered by order_by,
//     then the primary key (or the element itself when there is none), so
//     documents are deterministic; empty arrays are [] and missing single
//     relations null. Objects of more than 50 keys are built in chunks
//     joined with ||, under PostgreSQL's 100-argument limit.
//   - Parameters are batches of key values encoded as to_jsonb encodes them
//     (the raw change events' encoding): Query.Args turns them into one
//     text[] per key column, which the SQL casts to the column's type.
//   - Routes: a change to a row of table T used at node N affects the
//     aggregates whose documents contained the row before and those that
//     contain it after. Each Route gives the columns to watch, the columns
//     of the changed row (From) to feed, for the before and the after
//     image, into Lookup — one batched query walking up from N's parent to
//     the root over the current state of the tables — or, when From is
//     already the aggregate id, no query at all. Model.NeedsBeforeImage
//     lists the columns that must therefore be in the before image: Check
//     asks for REPLICA IDENTITY FULL when the table's identity lacks them.
//   - Check reports every problem of a model against a live server with the
//     SQL that fixes it; Init writes a mapping that binds.
//
// # Example
//
//	set, err := mappings.LoadPaths([]string{"mappings/shop.yaml"})
//	if err != nil {
//		return err // an ErrorList: print it, one problem per line
//	}
//	cat, err := mappings.ReadCatalog(ctx, pool)
//	if err != nil {
//		return err
//	}
//	model, err := mappings.Bind(set, cat)
//	if err != nil {
//		return err
//	}
//	customer := model.Aggregate("customer")
//	args, err := customer.Build.Args([][]json.RawMessage{{json.RawMessage(`7`)}})
//	if err != nil {
//		return err
//	}
//	rows, err := pool.Query(ctx, customer.Build.SQL, args...) // id, doc
//
// # Testing
//
// Pure tests run anywhere. Tests named TestPG* (and the command tests in
// cmd/decant) need the PostgreSQL of `bash e2e/infra/pg.sh up`; they are
// skipped with -short and fail under CI=true when it is unreachable. The
// loader's fuzz target runs with
//
//	go test ./mappings -run=^$ -fuzz=FuzzLoad -fuzztime=1m
package mappings
