package output

import "testing"

func TestEscape(t *testing.T) {
	cases := map[string]string{
		"plain":             "plain",
		"tab\there":         `tab\there`,
		"new\nline\r":       `new\nline\r`,
		"\x1b[2Jclear":      `\x1b[2Jclear`,
		"bad\xffutf8":       `bad\xffutf8`,
		"c1\u0085next":      `c1\u0085next`,
		"unicode ✓ ordnung": "unicode ✓ ordnung",
	}
	for in, want := range cases {
		if got := Escape(in); got != want {
			t.Errorf("Escape(%q) = %q, want %q", in, got, want)
		}
	}
}
