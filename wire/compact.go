package wire

import "bytes"

// AppendCompact appends the JSON text src to dst without insignificant
// whitespace. src must be valid JSON (documents come from PostgreSQL's
// json builders, which put spaces after colons and commas and newlines
// between array elements); strings are copied unchanged. It is a single
// pass with no allocation beyond dst's growth, unlike json.Compact, and
// it crosses each string with bytes.IndexByte rather than byte by byte
// (strings are most of a document's bytes).
func AppendCompact(dst, src []byte) []byte {
	start := 0 // first byte of src not yet copied
	for i := 0; i < len(src); {
		switch src[i] {
		case '"':
			i = stringEnd(src, i)
		case ' ', '\n', '\r', '\t':
			dst = append(dst, src[start:i]...)
			i++
			start = i
		default:
			i++
		}
	}
	return append(dst, src[start:]...)
}

// stringEnd returns the index after the string that starts at src[open]
// (len(src) when it does not end).
func stringEnd(src []byte, open int) int {
	for j := open + 1; ; j++ {
		k := bytes.IndexByte(src[j:], '"')
		if k < 0 {
			return len(src)
		}
		j += k
		escapes := 0 // backslashes right before the quote: an odd number escapes it
		for p := j - 1; p > open && src[p] == '\\'; p-- {
			escapes++
		}
		if escapes%2 == 0 {
			return j + 1
		}
	}
}
