package resolver

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

// MappingError is a statement generated from the mappings that PostgreSQL
// refuses for a reason no retry can fix: a mapped column or table was
// dropped, renamed or retyped (SQLSTATE class 42, "syntax error or access
// rule violation", e.g. 42703 undefined_column, 42883 undefined_function
// for a join of retyped columns). The stage that meets one stops instead of
// retrying: its offsets stay uncommitted, so nothing is lost, and it
// resumes from them once the mappings match the database again.
type MappingError struct {
	Stage     string // "map" or "build"
	Aggregate string
	Err       error // the statement's error, with PostgreSQL's message
}

func (e *MappingError) Error() string {
	return fmt.Sprintf("aggregate %s: the %s stage's SQL no longer matches the database: %v", e.Aggregate, e.Stage, e.Err)
}

func (e *MappingError) Unwrap() error { return e.Err }

// Fix says what to do about e.
func (e *MappingError) Fix() string {
	return "run `decant check` to see what in the mappings no longer matches the database; edit the mapping (or restore the column), then restart decant — the stage resumes from where it stopped, nothing is lost; if the documents' shape changed, also `decant backfill --reindex " + e.Aggregate + "`"
}

// mappingBroken returns err as a *MappingError when PostgreSQL refused
// the statement with a class 42 error, else err itself.
func mappingBroken(stage, aggregate string, err error) error {
	var pe *pgconn.PgError
	if err == nil || !errors.As(err, &pe) || len(pe.Code) != 5 || pe.Code[:2] != "42" {
		return err
	}
	return &MappingError{Stage: stage, Aggregate: aggregate, Err: err}
}
