// Package bench holds protctl's benchmarks. Each compares against a raw
// baseline measured in the same run (plain XREADGROUP+XACK, a raw franz-go
// consumer, one round trip per key, ...) and reports the ratio as a
// custom metric, so the figures in docs/benchmarks.md do not depend on the
// machine they were taken on. Run them with `make bench` or
// `go test -run '^$' -bench . ./bench/`.
package bench
