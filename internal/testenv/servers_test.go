package testenv

import "testing"

// TestPGPort: the port of each PostgreSQL major follows e2e/infra/common.sh.
func TestPGPort(t *testing.T) {
	for _, tc := range []struct{ version, port, want string }{
		{"", "", "55432"},
		{"15", "", "55432"},
		{"16", "", "55416"},
		{"18", "", "55418"},
		{"17", "56000", "56000"},
	} {
		if got := PGPort(tc.version, tc.port); got != tc.want {
			t.Errorf("PGPort(%q, %q) = %s, want %s", tc.version, tc.port, got, tc.want)
		}
	}
}
