package inspect

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/broker"
)

// wrapErr gives a Redis error the contract's meaning: a server WRONGTYPE
// reply becomes *broker.WrongTypeError (key, want), a transport failure
// wraps broker.ErrUnavailable (so the CLI exits 3), context errors stay
// as they are, and anything else is wrapped with the operation.
func wrapErr(op, key, want string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) {
		return err
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		if strings.HasPrefix(rerr.Error(), "WRONGTYPE") {
			return &broker.WrongTypeError{Op: op, Key: key, Want: want}
		}
		return fmt.Errorf("inspect: %s %s: %w", op, key, err)
	}
	return fmt.Errorf("inspect: %s: %w: %w", op, broker.ErrUnavailable, err)
}

// typed completes a *broker.WrongTypeError in err's chain whose actual
// type the server's WRONGTYPE reply did not say (Got empty) with one TYPE
// call, so that every wrong-type error names the key, the type it holds
// and the type expected. err is returned as it is otherwise.
func (in *Inspector) typed(ctx context.Context, err error) error {
	var wte *broker.WrongTypeError
	if errors.As(err, &wte) && wte.Got == "" && wte.Key != "" {
		if t, terr := in.client.Type(ctx, wte.Key).Result(); terr == nil && t != "none" {
			wte.Got = t
		}
	}
	return err
}

// isReplyErr reports whether err is a server reply (the command ran and
// was refused) rather than a transport failure.
func isReplyErr(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr) && !errors.Is(err, redis.Nil)
}

// isNoSuchKey is XINFO's reply for a missing stream.
func isNoSuchKey(err error) bool {
	return isReplyErr(err) && strings.HasPrefix(err.Error(), "ERR no such key")
}

// pipeErr returns the first transport error of a pipeline's Exec: reply
// errors are per command and handled by the caller. A refused login is
// the exception: go-redis reports a connection's failed AUTH as Exec's
// error without setting it on the pipeline's commands, which would then
// read as empty replies (a category that looks missing, a lease that
// looks free), so it fails the whole read.
func pipeErr(op string, err error) error {
	if err == nil || errors.Is(err, redis.Nil) {
		return nil
	}
	if isReplyErr(err) && !isAuthErr(err) {
		return nil
	}
	return wrapErr(op, "", "", err)
}

// isAuthErr reports a server's refusal of the connection's credentials.
func isAuthErr(err error) bool {
	msg := err.Error()
	return strings.HasPrefix(msg, "WRONGPASS") || strings.HasPrefix(msg, "NOAUTH")
}

func (in *Inspector) serverTime(ctx context.Context) (time.Time, error) {
	t, err := in.client.Time(ctx).Result()
	if err != nil {
		return time.Time{}, wrapErr("time", "", "", err)
	}
	return t, nil
}

// idMillis is the millisecond part of a stream id.
func idMillis(id string) (int64, bool) {
	ms, _, _ := strings.Cut(id, "-")
	n, err := strconv.ParseInt(ms, 10, 64)
	return n, err == nil
}

// idLess compares two stream ids; unparsable ids compare as strings.
func idCompare(a, b string) int {
	x, errA := broker.ParseStreamID(a)
	y, errB := broker.ParseStreamID(b)
	if errA != nil || errB != nil {
		return strings.Compare(a, b)
	}
	return x.Compare(y)
}

// scanKeys runs a paced SCAN MATCH match TYPE typ over the whole
// keyspace (every master of a cluster) and calls fn for each key
// returned. fn and Progress are called with a lock held, never
// concurrently. A key may be returned more than once (as with SCAN).
//
// With stop set, the scan ends at the first key fn counts, returning
// stop.
func (in *Inspector) scanKeys(ctx context.Context, match, typ string, opts ScanOptions, fn func(key string) bool, stop ...error) error {
	count := opts.Count
	if count <= 0 {
		count = 1000
	}
	pause := opts.Pause
	if pause == 0 {
		pause = time.Millisecond
	}
	var (
		mu   sync.Mutex
		prog ScanProgress
	)
	scanOne := func(ctx context.Context, c redis.Cmdable) error {
		var cursor uint64
		for {
			keys, next, err := c.ScanType(ctx, cursor, match, count, typ).Result()
			if err != nil {
				return wrapErr("scan", match, "", err)
			}
			mu.Lock()
			prog.Calls++
			prog.Scanned += int64(len(keys))
			for _, k := range keys {
				if fn(k) {
					prog.Found++
				}
			}
			if len(stop) > 0 && prog.Found > 0 {
				mu.Unlock()
				return stop[0]
			}
			if opts.Progress != nil {
				opts.Progress(prog)
			}
			mu.Unlock()
			cursor = next
			if cursor == 0 {
				return nil
			}
			if pause > 0 {
				t := time.NewTimer(pause)
				select {
				case <-ctx.Done():
					t.Stop()
					return ctx.Err()
				case <-t.C:
				}
			}
		}
	}
	var err error
	if cc, ok := in.client.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return scanOne(ctx, c) })
	} else {
		err = scanOne(ctx, in.client)
	}
	if err != nil {
		return err
	}
	if opts.Progress != nil {
		prog.Done = true
		opts.Progress(prog)
	}
	return nil
}

// escapeGlob quotes SCAN MATCH metacharacters in s.
func escapeGlob(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '*', '?', '[', ']', '\\', '^', '-':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// durationText formats d for a verdict: whole seconds, or milliseconds
// under a second.
func durationText(d time.Duration) string {
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

func ptr[T any](v T) *T { return &v }
