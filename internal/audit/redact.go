package audit

import (
	"net/url"
	"regexp"
	"strings"
)

// Redacted replaces a secret in a recorded command line.
const Redacted = "xxxxx"

// RedactArgs returns args with every secret replaced, for the recorded
// command line: the password of any URL's user info (--redis
// redis://:pw@host, in any flag or argument), URL query parameters and
// flag values whose name says password, token or secret. Passwords should
// never be in argv (CLI.md: env or file), but an operator may still put
// one there, and the audit log is read by more people than the shell
// history is. A URL that does not parse is replaced whole, since it might
// hold a password we cannot find. Flags naming a file (--password-file)
// keep their value: a path is not a secret.
func RedactArgs(args []string) []string {
	out := make([]string, len(args))
	secretNext := false
	for i, a := range args {
		switch {
		case secretNext:
			out[i] = Redacted
			secretNext = false
			continue
		case strings.HasPrefix(a, "-") && !strings.HasPrefix(a, "---"):
			name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
			if secretFlag(name) {
				if hasValue {
					out[i] = a[:len(a)-len(value)] + Redacted
				} else {
					out[i], secretNext = a, true
				}
				continue
			}
			if hasValue {
				out[i] = a[:len(a)-len(value)] + redactURL(value)
				continue
			}
		}
		out[i] = redactURL(a)
	}
	return out
}

func secretFlag(name string) bool {
	name = strings.ToLower(name)
	if strings.HasSuffix(name, "-file") || strings.HasSuffix(name, "file") {
		return false
	}
	return isSecretName(name)
}

func isSecretName(name string) bool {
	name = strings.ToLower(name)
	for _, s := range []string{"password", "passwd", "token", "secret"} {
		if strings.Contains(name, s) {
			return true
		}
	}
	return false
}

// urlRe finds URLs inside an argument (a --reason may quote one).
var urlRe = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://[^\s'"]+`)

// redactURL hides the password and secret query parameters of every URL
// in s.
func redactURL(s string) string {
	if !strings.Contains(s, "://") {
		return s
	}
	return urlRe.ReplaceAllStringFunc(s, redactOneURL)
}

func redactOneURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "<unparsable URL>"
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), Redacted)
	}
	if u.RawQuery != "" {
		q := u.Query()
		changed := false
		for k := range q {
			if isSecretName(k) {
				q.Set(k, Redacted)
				changed = true
			}
		}
		if changed {
			u.RawQuery = q.Encode()
		}
	}
	return u.String()
}

// CommandLine joins args (with the program's name first) into one line a
// shell would split back the same way, quoting what needs it.
func CommandLine(args []string) string {
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = shellQuote(a)
	}
	return strings.Join(quoted, " ")
}

func shellQuote(s string) string {
	if s == "" {
		return "''"
	}
	if strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=,@+%^", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
