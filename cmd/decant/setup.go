package main

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/decant-cdc/decant/config"
	"github.com/decant-cdc/decant/indexer"
	"github.com/decant-cdc/decant/internal/metric"
	"github.com/decant-cdc/decant/mappings"
	"github.com/decant-cdc/decant/opsapi"
	"github.com/decant-cdc/decant/resolver"
	"github.com/decant-cdc/decant/watermark"
)

// stack is what every command that touches the pipeline opens from
// decant.yaml: the logger, the mappings bound to the live catalog (every
// aggregate must bind), a pool with the resolver's session settings, the
// Kafka options, the stage config and the process's metrics registry.
type stack struct {
	cfg   *config.Config
	log   *slog.Logger
	model *mappings.Model
	cat   *mappings.Catalog
	pool  *pgxpool.Pool
	// build is the pool the build stage and preview read documents
	// from: postgres.build_dsn's, else pool.
	build *pgxpool.Pool
	kopts []kgo.Opt
	rcfg  resolver.Config
	reg   *prometheus.Registry // every metric of this process, served on /metrics
}

func (s *stack) close() {
	if s.build != s.pool {
		s.build.Close()
	}
	s.pool.Close()
}

// openStack loads the config and opens the stack, its connections named
// decant-<command> (application_name); see openStackFrom.
func (c *call) openStack(ctx context.Context) (*stack, error) {
	cfg, err := config.Load(c.configPath, os.Environ())
	if err != nil {
		return nil, err
	}
	return openStackFrom(ctx, cfg, "decant-"+c.name, c.stderr)
}

// openStackFrom binds the mappings to the live catalog and opens the pool.
// It fails before any side effect.
func openStackFrom(ctx context.Context, cfg *config.Config, appName string, stderr io.Writer) (*stack, error) {
	conn, err := connectPG(ctx, cfg)
	if err != nil {
		return nil, err
	}
	model, cat, err := loadAndBind(ctx, cfg, conn)
	conn.Close(context.Background())
	if err != nil {
		return nil, err
	}
	return newStack(ctx, cfg, model, cat, appName, stderr)
}

// newStack opens the pool of a bound model.
func newStack(ctx context.Context, cfg *config.Config, model *mappings.Model, cat *mappings.Catalog, appName string, stderr io.Writer) (*stack, error) {
	kopts, err := cfg.Kafka.ClientOptions()
	if err != nil {
		return nil, err
	}
	pool, err := resolver.NewPool(ctx, cfg.Postgres.DSN, appName, 0)
	if err != nil {
		return nil, err
	}
	build := pool
	if cfg.Postgres.BuildDSN != "" {
		if build, err = resolver.NewPool(ctx, cfg.Postgres.BuildDSN, appName, 0); err != nil {
			pool.Close()
			return nil, fmt.Errorf("postgres.build_dsn: %w", err)
		}
	}
	log := cfg.Log.NewLogger(stderr)
	reg := prometheus.NewRegistry()
	kopts = append(kopts, kgo.WithHooks(metric.KafkaRequests(reg)))
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		watermark.SlotLagGauge(pool, cfg.Postgres.Slot))
	rcfg := resolver.ConfigFrom(cfg, kopts, log, reg)
	return &stack{cfg: cfg, log: log, model: model, cat: cat, pool: pool, build: build, kopts: kopts, rcfg: rcfg, reg: reg}, nil
}

// openTracker connects to Kafka, checks that a broker answers and returns
// the watermark tracker of the stack's model.
func (s *stack) openTracker(ctx context.Context) (*watermark.Tracker, error) {
	t, err := watermark.Dial(ctx, watermark.ConfigFrom(s.cfg, s.model), s.pool, s.kopts)
	if err != nil {
		return nil, kafkaError(s.cfg.Kafka, err)
	}
	return t, nil
}

// opsOptions are the ops API's settings from decant.yaml's http section.
func opsOptions(cfg *config.Config) opsapi.Options {
	return opsapi.Options{Token: cfg.HTTP.Token, MaxWait: cfg.HTTP.MaxWait, RefreshInterval: cfg.HTTP.WaitRefreshInterval}
}

// stage is what the stream, map and build commands run: run until ctx
// ends, then close (nil when there is nothing to release).
type stage struct {
	run   func(ctx context.Context) error
	close func()
}

// stageCommand is the body of the command that runs one stage: it opens
// the stack, opens the stage with newStage (on failure it reports the
// error and returns newStage's exit code) and runs it with runStage,
// logging stopped if it fails.
func stageCommand(name, stopped string, newStage func(ctx context.Context, st *stack) (stage, int, error)) func(context.Context, *call) int {
	return func(ctx context.Context, c *call) int {
		st, err := c.openStack(ctx)
		if err != nil {
			return c.fail(1, err)
		}
		defer st.close()
		s, code, err := newStage(ctx, st)
		if err != nil {
			return c.fail(code, err)
		}
		if s.close != nil {
			defer s.close()
		}
		return st.runStage(ctx, name, stopped, s.run)
	}
}

// runStage runs one stage until ctx ends, serving the HTTP port beside it
// in the background (a failure to listen is logged, not fatal), and
// returns the exit status: 1 when the stage failed, after logging stopped.
func (s *stack) runStage(ctx context.Context, name, stopped string, run func(context.Context) error) int {
	opsCtx, cancel := context.WithCancel(ctx)
	tracker, err := s.openTracker(opsCtx)
	if err == nil {
		defer tracker.Close()
	}
	engines, _ := indexer.Engines(s.cfg)
	ops := opsapi.NewServer(s.log, tracker, indexer.Refreshers(engines, s.model.Aggregates), s.reg, opsOptions(s.cfg))
	registerAll(s.reg, ops.Collectors())
	ops.SetDocumentCounter(documentCounter(engines, s.model))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := ops.Serve(opsCtx, s.cfg.HTTP.Listen); err != nil {
			s.log.Warn("http server not started", "err", err)
		}
	}()
	defer func() { cancel(); <-done }()
	ops.SetStage(name, true)
	if err := run(ctx); err != nil {
		if stageStopped(ctx, s.log, ops, s.cfg, s.pool, name, err) {
			<-ctx.Done() // keep answering /readyz (503, why) until stopped
		} else {
			ops.StageExited(name, err)
			s.log.Error(stopped, "err", err)
		}
		return 1
	}
	return 0
}

// loadAndBind binds the config's mappings to the live catalog
// (mappings.LoadAndBind).
func loadAndBind(ctx context.Context, cfg *config.Config, conn *pgx.Conn) (*mappings.Model, *mappings.Catalog, error) {
	paths, err := cfg.MappingPaths()
	if err != nil {
		return nil, nil, err
	}
	model, cat, err := mappings.LoadAndBind(ctx, conn, paths)
	if err == nil {
		err = checkRedaction(cfg, model, cat)
	}
	return model, cat, err
}

// connect loads the config and connects to PostgreSQL. On failure it
// reports the error (the config's as it is) and returns exit code 1 and a
// nil conn.
func (c *call) connect(ctx context.Context) (*config.Config, *pgx.Conn, int) {
	cfg, err := config.Load(c.configPath, os.Environ())
	if err != nil {
		fmt.Fprintln(c.stderr, err)
		return nil, nil, 1
	}
	conn, err := connectPG(ctx, cfg)
	if err != nil {
		return nil, nil, c.fail(1, err)
	}
	return cfg, conn, 0
}

// connectPG connects to postgres.dsn; its error says what in the DSN to
// check (pgHint).
func connectPG(ctx context.Context, cfg *config.Config) (*pgx.Conn, error) {
	conn, err := pgx.Connect(ctx, cfg.Postgres.DSN)
	if err != nil {
		return nil, fmt.Errorf("connecting to PostgreSQL at %s: %w (%s)", config.RedactDSN(cfg.Postgres.DSN), err, pgHint(err))
	}
	return conn, nil
}

// pgHint says what in postgres.dsn to check after a failed connection:
// the TLS parameters (sslmode, sslrootcert) for a certificate or TLS
// failure, the user and password for a refused login.
func pgHint(err error) string {
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var pgErr *pgconn.PgError
	msg := err.Error()
	switch {
	case errors.As(err, &unknown) || strings.Contains(msg, "certificate signed by unknown authority"):
		return "check postgres.dsn: sslrootcert must name the file of the CA that signed the server's certificate"
	case errors.As(err, &host) || strings.Contains(msg, "certificate is valid for"):
		return "check postgres.dsn: with sslmode=verify-full the host must be a name or IP the server's certificate lists"
	case strings.Contains(msg, "server refused TLS connection"):
		return "check postgres.dsn: the server does not offer TLS, which its sslmode requires; turn ssl on in the server or connect to one that has it"
	case errors.As(err, &pgErr) && pgErr.Code == "28P01":
		return "check postgres.dsn: user and password"
	case errors.As(err, &pgErr) && pgErr.Code == "28000":
		return "check postgres.dsn: user, database and sslmode against the server's pg_hba.conf"
	}
	return "check postgres.dsn"
}

// kafkaError is the error of a Kafka client that could not talk to
// kafka.brokers, saying which setting to check: the SASL credentials or
// mechanism, the TLS CA, or the listener (TLS or not) the brokers point at.
func kafkaError(k config.Kafka, err error) error {
	what, hint := "is not reachable", "check kafka.brokers, kafka.tls, kafka.sasl"
	var eof *kgo.ErrFirstReadEOF
	switch {
	case errors.Is(err, kerr.SaslAuthenticationFailed):
		what, hint = "refused the credentials", "check kafka.sasl.username, kafka.sasl.password and kafka.sasl.mechanism"
	case errors.Is(err, kerr.UnsupportedSaslMechanism):
		hint = fmt.Sprintf("check kafka.sasl.mechanism: the listener does not enable %s", k.SASL.Mechanism)
	case config.TLSHint("kafka", "kafka.brokers", err) != "":
		hint = config.TLSHint("kafka", "kafka.brokers", err)
		if strings.Contains(hint, "does not speak TLS") {
			hint = "check kafka.brokers: each must be an SSL or SASL_SSL listener while kafka.tls.enabled is true"
		}
	case errors.As(err, &eof) && k.TLS.Enabled:
		hint = "check kafka.brokers: each must be an SSL or SASL_SSL listener while kafka.tls.enabled is true"
	case errors.As(err, &eof):
		hint = "check kafka.tls and kafka.sasl: the listener closed the connection at once, as a TLS or SASL listener does to a client without them"
	}
	return fmt.Errorf("kafka at %v %s: %w (%s)", k.Brokers, what, err, hint)
}

// opsView is what the read-only commands (status, wait) look at: the
// stack, its watermark tracker and the search engines (none when none is
// configured).
type opsView struct {
	*stack
	tracker *watermark.Tracker
	engines []indexer.Engine
}

func (v *opsView) close() {
	v.tracker.Close()
	v.stack.close()
}

// openOpsView loads the config and opens an opsView, its connections named
// decant-<command>. On failure it reports the error and returns the exit
// code: 2 for a bad config, 1 otherwise.
func (c *call) openOpsView(ctx context.Context) (*opsView, int) {
	cfg, err := config.Load(c.configPath, os.Environ())
	if err != nil {
		return nil, c.fail(2, err)
	}
	st, err := openStackFrom(ctx, cfg, "decant-"+c.name, c.stderr)
	if err != nil {
		return nil, c.fail(1, err)
	}
	tracker, err := st.openTracker(ctx)
	if err != nil {
		st.close()
		return nil, c.fail(1, err)
	}
	engines, err := indexer.Engines(cfg)
	if err != nil {
		tracker.Close()
		st.close()
		return nil, c.fail(1, err)
	}
	return &opsView{stack: st, tracker: tracker, engines: engines}, 0
}

// registerAll registers collectors on reg; one already there (a second
// server in the process) is kept.
func registerAll(reg prometheus.Registerer, cs []prometheus.Collector) {
	for _, c := range cs {
		_ = reg.Register(c)
	}
}
