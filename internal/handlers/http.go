package handlers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/protctl/protctl/pkg/runtime"
)

// HTTPConfig configures NewHTTP.
type HTTPConfig struct {
	// URL receives a POST per message. Required (http or https).
	URL string
	// Timeout bounds one request, response body included; a timeout is a
	// systemic failure. Default: 10s.
	Timeout time.Duration
	// Headers are added to every request.
	Headers map[string]string
	// Client sends the requests. Default: a client of its own (redirects
	// are never followed, whatever the client says).
	Client *http.Client
}

// HTTP posts each message's envelope to a URL as application/json, with
// the metadata as X-Protctl-* headers (X-Protctl-Subscription,
// X-Protctl-Partition, X-Protctl-Position, X-Protctl-Generation,
// X-Protctl-Attempt, ...). A 2xx reply is success; 429, 5xx, a timeout or a
// connection failure is systemic (the endpoint is unwell, not the message);
// any other status is an aggregate failure carrying the reply's status and
// the start of its body.
//
// It is safe for concurrent use.
type HTTP struct {
	cfg    HTTPConfig
	client *http.Client
}

// NewHTTP returns an HTTP handler. It does no I/O.
func NewHTTP(cfg HTTPConfig) (*HTTP, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("handlers: http: want an http:// or https:// URL, got %q", cfg.URL)
	}
	if cfg.Timeout < 0 {
		return nil, errors.New("handlers: http: negative timeout")
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	c := cfg.Client
	if c == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		// The runtime calls the handler for many partitions at once.
		t.MaxIdleConnsPerHost = 64
		c = &http.Client{Transport: t}
	}
	own := *c
	own.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &HTTP{cfg: cfg, client: &own}, nil
}

// headerName turns PROTCTL_SUBSCRIPTION into X-Protctl-Subscription.
func headerName(env string) string {
	parts := strings.Split(strings.ToLower(env), "_")
	for i, p := range parts {
		if p != "" {
			parts[i] = strings.ToUpper(p[:1]) + p[1:]
		}
	}
	return "X-" + strings.Join(parts, "-")
}

// Handle posts m.
func (h *HTTP) Handle(ctx context.Context, m runtime.Message) error {
	reqCtx, cancel := context.WithTimeout(ctx, h.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(reqCtx, http.MethodPost, h.cfg.URL, bytes.NewReader(m.Data))
	if err != nil {
		return runtime.Fatal(fmt.Errorf("http: %w", err))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "protctl")
	for _, kv := range metadata(m) {
		req.Header.Set(headerName(kv[0]), kv[1])
	}
	for k, v := range h.cfg.Headers {
		req.Header.Set(k, v)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return runtime.Systemic(fmt.Errorf("http POST %s: stopped: %w", h.cfg.URL, context.Cause(ctx)))
		}
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(reqCtx.Err(), context.DeadlineExceeded) {
			return runtime.Systemic(fmt.Errorf("http POST %s: timed out after %s", h.cfg.URL, h.cfg.Timeout))
		}
		return runtime.Systemic(fmt.Errorf("http POST %s: %w", h.cfg.URL, err))
	}
	body := &tail{n: 512}
	_, copyErr := io.Copy(body, io.LimitReader(resp.Body, 64<<10)) // drained, so the connection is reused
	_ = resp.Body.Close()
	code := resp.StatusCode
	switch {
	case code >= 200 && code < 300:
		if copyErr != nil && errors.Is(reqCtx.Err(), context.DeadlineExceeded) {
			return runtime.Systemic(fmt.Errorf("http POST %s: %s, reply body timed out after %s", h.cfg.URL, resp.Status, h.cfg.Timeout))
		}
		return nil
	case code == http.StatusTooManyRequests || code >= 500:
		return runtime.Systemic(fmt.Errorf("http POST %s: %s%s", h.cfg.URL, resp.Status, outputSuffix(body)))
	case code >= 300 && code < 400:
		return fmt.Errorf("http POST %s: %s (redirects are not followed)", h.cfg.URL, resp.Status)
	default:
		return fmt.Errorf("http POST %s: %s%s", h.cfg.URL, resp.Status, outputSuffix(body))
	}
}
