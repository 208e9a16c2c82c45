package testenv

import (
	"fmt"
	"os"
	"runtime"
	"strings"
)

// WithRedis is the body of a TestMain that shares one redis-server among
// a package's tests: it starts one with its files in a new temporary
// directory (named after prefix), runs body with the server and the
// directory, then stops the server and removes the directory. It returns
// body's exit code, or 1 (the reason on stderr) when the directory or
// the server cannot be made.
//
//	func TestMain(m *testing.M) {
//		os.Exit(testenv.WithRedis("mypkg-test-", func(r *testenv.Redis, _ string) int {
//			server = r
//			return m.Run()
//		}))
//	}
func WithRedis(prefix string, body func(r *Redis, dir string) int) int {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	r, err := NewRedis(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer r.Stop()
	return body(r, dir)
}

// Goroutine returns the stack of a running goroutine whose stack mentions
// one of names (e.g. "pkg.Func"), "" when none does: a leak check waits
// until it is "" after whatever started the goroutine has stopped.
func Goroutine(names ...string) string {
	buf := make([]byte, 1<<20)
	stacks := string(buf[:runtime.Stack(buf, true)])
	for _, g := range strings.Split(stacks, "\n\n") {
		for _, n := range names {
			if strings.Contains(g, n) {
				return g
			}
		}
	}
	return ""
}
