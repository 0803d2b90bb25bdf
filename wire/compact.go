package wire

// AppendCompact appends the JSON text src to dst without insignificant
// whitespace. src must be valid JSON (documents come from PostgreSQL's
// json builders, which put spaces after colons and commas and newlines
// between array elements); strings are copied unchanged. It is a single
// pass with no allocation beyond dst's growth, unlike json.Compact.
func AppendCompact(dst, src []byte) []byte {
	inString, escaped := false, false
	start := 0 // first byte of src not yet copied
	for i, c := range src {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == ' ' || c == '\n' || c == '\r' || c == '\t':
			dst = append(dst, src[start:i]...)
			start = i + 1
		}
	}
	return append(dst, src[start:]...)
}
