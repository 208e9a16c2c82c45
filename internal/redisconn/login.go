package redisconn

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// userLogin logs every new connection in as an ACL user given without a
// password, with AUTH user "" (which a user created with nopass accepts).
// go-redis sends credentials only when there is a password, so a user
// given alone (redis://limited@host, PROTCTL_REDIS_USERNAME) was dropped
// and every command ran as the default user. The login happens on the raw
// connection, before go-redis's handshake (HELLO, SELECT, CLIENT
// TRACKING), so the handshake runs as the user too and works where the
// default user is disabled.
type userLogin struct {
	user string
	// timeout bounds the exchange when the dial's context has no earlier
	// deadline (the dial timeout).
	timeout time.Duration
}

// newUserLogin returns the login hook for a client's credentials after
// every override, or nil when go-redis logs in by itself (a password) or
// nobody is to be logged in (no user).
func newUserLogin(user, password string, dialTimeout time.Duration) *userLogin {
	if user == "" || password != "" {
		return nil
	}
	if dialTimeout <= 0 {
		dialTimeout = 5 * time.Second // go-redis's default dial timeout
	}
	return &userLogin{user: user, timeout: dialTimeout}
}

// loginReply is the server's refusal of the login: a Redis error reply
// (WRONGPASS ... for a user that has a password or is off), so that
// callers classify it as they do go-redis's own authentication errors.
type loginReply string

func (e loginReply) Error() string { return string(e) }

// RedisError marks loginReply as a redis.Error.
func (loginReply) RedisError() {}

var _ redis.Error = loginReply("")

// DialHook logs each dialled connection in; a connection whose login
// fails is closed and the dial fails with the reply.
func (l *userLogin) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		if err := l.login(ctx, conn); err != nil {
			_ = conn.Close()
			return nil, err
		}
		return conn, nil
	}
}

func (l *userLogin) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (l *userLogin) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// maxLoginReply bounds the reply line read after AUTH.
const maxLoginReply = 4096

func (l *userLogin) login(ctx context.Context, conn net.Conn) error {
	deadline := time.Now().Add(l.timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if err := conn.SetDeadline(deadline); err != nil {
		return fmt.Errorf("redisconn: logging in as %q: %w", l.user, err)
	}
	cmd := "*3\r\n$4\r\nAUTH\r\n$" + strconv.Itoa(len(l.user)) + "\r\n" + l.user + "\r\n$0\r\n\r\n"
	if _, err := io.WriteString(conn, cmd); err != nil {
		return fmt.Errorf("redisconn: logging in as %q: %w", l.user, err)
	}
	// One byte at a time: nothing may be read past the reply, which is all
	// the server sends until the next command.
	var line []byte
	b := make([]byte, 1)
	for len(line) < 2 || string(line[len(line)-2:]) != "\r\n" {
		if len(line) >= maxLoginReply {
			return fmt.Errorf("redisconn: logging in as %q: the reply is longer than %d bytes", l.user, maxLoginReply)
		}
		n, err := conn.Read(b)
		if err != nil {
			return fmt.Errorf("redisconn: logging in as %q: %w", l.user, err)
		}
		line = append(line, b[:n]...)
	}
	if err := conn.SetDeadline(time.Time{}); err != nil {
		return fmt.Errorf("redisconn: logging in as %q: %w", l.user, err)
	}
	reply := string(line[:len(line)-2])
	switch {
	case reply == "+OK":
		return nil
	case len(reply) > 0 && reply[0] == '-':
		return loginReply(reply[1:])
	}
	return fmt.Errorf("redisconn: logging in as %q: unexpected reply %q", l.user, reply)
}
