package mappings

import (
	"fmt"
	"sort"
	"strings"

	"github.com/decant-cdc/decant/config"
)

// Error is one problem in a mapping file. Line and Column are 1-based; they
// are 0 only when the problem has no single place (an empty file list).
type Error struct {
	File         string
	Line, Column int
	// Path is the dotted path of the offending key, for example
	// aggregates.customer.relations.orders.
	Path string
	Msg  string
	// Fix is SQL that fixes the database side of the problem, when there is
	// one (a column type to change); `decant check` prints it. Not part of Error().
	Fix string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
		if e.Column > 0 {
			fmt.Fprintf(&b, ":%d", e.Column)
		}
	}
	if e.Path != "" {
		b.WriteString(": ")
		b.WriteString(e.Path)
	}
	b.WriteString(": ")
	b.WriteString(e.Msg)
	return b.String()
}

// ErrorList is every problem found in one Load or Bind, in file and
// position order. It prints one error per line.
type ErrorList []*Error

func (l ErrorList) Error() string {
	s := make([]string, len(l))
	for i, e := range l {
		s[i] = e.Error()
	}
	return strings.Join(s, "\n")
}

// Unwrap lets errors.As find the individual *Error values.
func (l ErrorList) Unwrap() []error {
	errs := make([]error, len(l))
	for i, e := range l {
		errs[i] = e
	}
	return errs
}

func (l ErrorList) sort() {
	sort.SliceStable(l, func(i, j int) bool {
		a, b := l[i], l[j]
		if a.File != b.File {
			return a.File < b.File
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Column < b.Column
	})
}

// err returns nil for an empty list, so callers can write `return l.err()`.
func (l ErrorList) err() error {
	if len(l) == 0 {
		return nil
	}
	l.sort()
	return l
}

// pos is where something was written: a file position and its key path.
type pos struct {
	File         string
	Line, Column int
	Path         string
}

func (p pos) errorf(format string, a ...any) *Error {
	return &Error{File: p.File, Line: p.Line, Column: p.Column, Path: p.Path, Msg: fmt.Sprintf(format, a...)}
}

// child returns the position p with key appended to its path.
func (p pos) child(key string) pos {
	if p.Path == "" {
		p.Path = key
	} else {
		p.Path += "." + key
	}
	return p
}

// suggest returns `; did you mean "x"?` for the closest of names
// (config.Closest, prefixes counting), or a list of the valid names when
// none is close, or "".
func suggest(got string, names []string) string {
	if best, ok := config.Closest(got, names, true); ok {
		return fmt.Sprintf("; did you mean %q?", best)
	}
	if len(names) > 0 && len(names) <= 15 {
		s := append([]string(nil), names...)
		sort.Strings(s)
		return "; valid: " + strings.Join(s, ", ")
	}
	return ""
}
