// Package binary tests the decant binary itself: `decant run` and the
// single-stage commands as separate processes, read-your-writes through
// /v1/wait, SIGTERM and kill -9, `decant status`, and refusal of bad
// configuration before any side effect.
package binary
