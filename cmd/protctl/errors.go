package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/protctl/protctl/internal/clierr"
	"github.com/protctl/protctl/internal/config"
	"github.com/protctl/protctl/internal/output"
	"github.com/protctl/protctl/internal/redisconn"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime/kafkasource"
)

// printError reports err on stderr: one JSON object in -o json and jsonl
// mode ({"error":{"code":"CONFLICT","message":"...","exitCode":5}}),
// otherwise "protctl: message", with a pointer to --help after an error in
// the command line.
func printError(ios *output.IOStreams, cmd *cobra.Command, format string, kind clierr.Kind, err error) {
	if clierr.IsPermissionDenied(err) {
		err = permissionDenied{err}
	}
	msg := output.Escape(err.Error())
	if format == string(output.FormatJSON) || format == string(output.FormatJSONL) {
		enc := json.NewEncoder(ios.ErrOut)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(map[string]errorBody{"error": {
			Code:     string(kind),
			Message:  err.Error(),
			ExitCode: kind.ExitCode(),
		}})
		return
	}
	var ml multiLine
	if errors.As(err, &ml) {
		// Several problems (a node config's): one line each, every line
		// escaped on its own so that a control character still cannot
		// forge output, but the line breaks between them are kept.
		lines := strings.Split(err.Error(), "\n")
		for i := range lines {
			lines[i] = output.Escape(lines[i])
		}
		msg = strings.Join(lines, "\nprotctl: ")
	}
	fmt.Fprintf(ios.ErrOut, "protctl: %s\n", msg)
	var cle commandLineError
	if errors.As(err, &cle) && cmd != nil {
		fmt.Fprintf(ios.ErrOut, "Run '%s --help' for usage.\n", cmd.CommandPath())
	}
}

// multiLine is an error made of several problems, one per line
// (*nodeconfig.Error, run node's lineErrors): printError keeps its line
// breaks.
type multiLine interface {
	error
	Lines() []string
}

// operatorError is err as an operator should read it, the one place
// where the library's errors are worded for the command line (the
// libraries keep their package prefixes, as STYLE wants):
//
//   - an unreachable backend the command dialled through the factory says
//     which Redis (or Kafka) it tried (a command that dialled both says
//     so only for a Kafka error that carries kafkasource.ErrUnreachable), where that address came from, and
//     the settings that choose it (--redis, PROTCTL_REDIS, the context's
//     redis.url; --kafka, PROTCTL_KAFKA, kafka.brokers), with the cause;
//   - a refused Redis login names the credential settings;
//   - otherwise the package prefixes ("inspect: ", "broker: ",
//     "redisstore: ", ...) are dropped from the message.
//
// The error's chain, and so its exit code, is unchanged.
func (f *Factory) operatorError(err error, kind clierr.Kind) error {
	if err == nil || clierr.IsPermissionDenied(err) {
		return err
	}
	f.redisMu.Lock()
	usedRedis, usedKafka := f.usedRedis, f.usedKafka
	f.redisMu.Unlock()
	text := stripPackagePrefixes(err.Error())
	if kind == clierr.Unavailable && f.settings != nil {
		switch s := f.settings; {
		case usedKafka && errors.Is(err, kafkasource.ErrUnreachable):
			text = fmt.Sprintf("cannot reach Kafka at %s (%s): %s; the brokers are set by --kafka, %s or the context's kafka.brokers",
				strings.Join(s.Kafka, ","), sourceText(s, "kafka", "--kafka", config.EnvKafka, "kafka.brokers"), unavailableCause(text), config.EnvKafka)
		case usedKafka:
			// Both backends may be in the chain (a topic's Kafka read
			// fails inside a Redis-backed view): without the Kafka
			// sentinel it cannot be told which one failed, so the
			// message stays the library's own.
		case usedRedis && isLoginRefused(err):
			text = fmt.Sprintf("Redis at %s refused the login: %s; the user and password are set by the URL's user:password, %s and %s (or %s), or the context's redis.username and redis.passwordFile",
				config.RedactURL(s.Redis.URL), unavailableCause(text), config.EnvRedisUsername, config.EnvRedisPassword, config.EnvRedisPasswordFile)
			if redisconn.IsSentinelURL(s.Redis.URL) {
				text += fmt.Sprintf("; the Sentinels' own user and password are set by %s and %s (or %s), or the context's redis.sentinel.username and redis.sentinel.passwordFile",
					config.EnvRedisSentinelUsername, config.EnvRedisSentinelPassword, config.EnvRedisSentinelPasswordFile)
			}
		case usedRedis:
			text = fmt.Sprintf("cannot reach Redis at %s (%s): %s; the address is set by --redis, %s or the context's redis.url",
				config.RedactURL(s.Redis.URL), sourceText(s, "redis", "--redis", config.EnvRedis, "redis.url"), unavailableCause(text), config.EnvRedis)
		}
	}
	if text == err.Error() {
		return err
	}
	return operatorText{err: err, text: text}
}

// completeWrongType names the type held by the key of a
// *broker.WrongTypeError in err's chain that does not say it (a script's
// PROTCTL_WRONGTYPE or the server's WRONGTYPE reply names only what was
// wanted): one TYPE on the command's own Redis client, before it is
// closed, so that every wrong-type message names the key, the type it
// holds and the type expected. Nothing is done when the command dialled
// no Redis or the TYPE fails.
func (f *Factory) completeWrongType(ctx context.Context, err error) {
	var wte *broker.WrongTypeError
	if !errors.As(err, &wte) || wte.Got != "" || wte.Key == "" {
		return
	}
	f.redisMu.Lock()
	c := f.redisClient
	f.redisMu.Unlock()
	if c == nil {
		return
	}
	ctx = context.WithoutCancel(ctx)
	if d := f.Timeout(); d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	if t, terr := c.Type(ctx, wte.Key).Result(); terr == nil && t != "none" {
		wte.Got = t
	}
}

// operatorText is an error with the operator's wording; it unwraps to the
// error it words.
type operatorText struct {
	err  error
	text string
}

func (e operatorText) Error() string { return e.text }
func (e operatorText) Unwrap() error { return e.err }

// packagePrefixes are the packages whose names start the messages of
// their errors ("inspect: scan: ..."): what the operator reads leaves them
// out.
var packagePrefixes = []string{
	"inspect", "broker", "redisbroker", "memorybroker", "redisstore", "memstore", "runtime",
	"repair", "kafkasource", "audit", "acl", "nodeconfig", "handlers", "admin", "demo", "tui", "output",
}

// prefixWords are what a package prefix becomes instead of nothing, where
// the package names the backend the operator must look at.
var prefixWords = map[string]string{"kafkasource": "Kafka: "}

// stripPackagePrefixes drops "pkg: " at the start of msg and after each
// ": " (the separator of wrapped errors), for the packages above.
func stripPackagePrefixes(msg string) string {
	var b strings.Builder
	rest := msg
	atStart := true
	for rest != "" {
		if atStart {
			for {
				trimmed := false
				for _, p := range packagePrefixes {
					if r, ok := strings.CutPrefix(rest, p+": "); ok {
						rest, trimmed = r, true
						b.WriteString(prefixWords[p])
						break
					}
				}
				if !trimmed {
					break
				}
			}
		}
		i := strings.Index(rest, ": ")
		if i < 0 {
			b.WriteString(rest)
			break
		}
		b.WriteString(rest[:i+2])
		rest = rest[i+2:]
		atStart = true
	}
	return b.String()
}

// unavailableCause is the part of an unavailable error's (prefix-free)
// message after the last "unavailable: ": the transport's own words.
func unavailableCause(text string) string {
	for _, marker := range []string{"unavailable: ", "brokers unreachable: "} {
		if i := strings.LastIndex(text, marker); i >= 0 {
			return text[i+len(marker):]
		}
	}
	return text
}

// sourceText says where setting key came from: the flag, the variable,
// the context's field, or the default.
func sourceText(s *config.Settings, key, flag, env, field string) string {
	switch s.Sources[key] {
	case config.SourceFlag:
		return "from " + flag
	case config.SourceEnv:
		return "from " + env
	case config.SourceContext:
		return fmt.Sprintf("from context %q, %s", s.Context, field)
	}
	return "the default"
}

// isLoginRefused reports a Redis reply refusing the connection's
// credentials.
func isLoginRefused(err error) bool {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return false
	}
	msg := rerr.Error()
	return strings.HasPrefix(msg, "WRONGPASS") || strings.HasPrefix(msg, "NOAUTH") || strings.HasPrefix(msg, "ERR AUTH") || strings.HasPrefix(msg, "ERR invalid password")
}

// permissionDenied is a Redis ACL denial, said so in words: the reply
// (NOPERM ...) names the command or that a key or channel was refused.
type permissionDenied struct{ error }

func (e permissionDenied) Error() string {
	return "permission denied: " + e.error.Error() +
		"; the Redis ACL user lacks a command, key or channel this needs" +
		" (protctl acl print --role readonly|operator|node prints the rules of each role)"
}

func (e permissionDenied) Unwrap() error { return e.error }

type errorBody struct {
	Code     string `json:"code"`
	Message  string `json:"message"`
	ExitCode int    `json:"exitCode"`
}

// errorFormat is the -o value in force: the parsed one, or when flag
// parsing failed before reaching -o, the one found in the raw arguments,
// so that a usage error of a JSON consumer is JSON too.
func (f *Factory) errorFormat(args []string) string {
	if f.changed("output") {
		return f.flags.output
	}
	return scanOutputFlag(args)
}

func scanOutputFlag(args []string) string {
	found := ""
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			i = len(args)
		case a == "-o" || a == "--output":
			if i+1 < len(args) {
				found = args[i+1]
				i++
			}
		case strings.HasPrefix(a, "--output="):
			found = strings.TrimPrefix(a, "--output=")
		case strings.HasPrefix(a, "-o="):
			found = strings.TrimPrefix(a, "-o=")
		case strings.HasPrefix(a, "-o") && !strings.HasPrefix(a, "--"):
			found = strings.TrimPrefix(a, "-o")
		}
	}
	return found
}
