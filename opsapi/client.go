package opsapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
)

// Client calls one decant instance. Safe for concurrent use.
type Client struct {
	base  string
	token string
	http  *http.Client
}

// WithToken returns a client that sends token as a bearer token (the
// instance's http.token).
func (c *Client) WithToken(token string) *Client {
	d := *c
	d.token = token
	return &d
}

// do sends req with the token, if any.
func (c *Client) do(req *http.Request) (*http.Response, error) {
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	return c.http.Do(req)
}

// NewClient returns a client of the decant HTTP API at baseURL (e.g. http://127.0.0.1:8080).
func NewClient(baseURL string) *Client {
	return &Client{base: baseURL, http: &http.Client{}}
}

// ErrTimeout is returned by Wait when the LSN was not indexed in time (HTTP 408).
var ErrTimeout = errors.New("decant: not indexed before the timeout")

// Wait blocks until every change committed at or before lsn is in every
// sink and searchable, or timeout passes (ErrTimeout).
func (c *Client) Wait(ctx context.Context, lsn string, timeout time.Duration) error {
	q := url.Values{"lsn": {lsn}, "timeout": {timeout.String()}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+PathWait+"?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	res, err := c.do(req)
	if err != nil {
		return fmt.Errorf("decant: wait: %w", err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	switch res.StatusCode {
	case http.StatusOK:
		return nil
	case http.StatusRequestTimeout:
		return ErrTimeout
	default:
		return fmt.Errorf("decant: wait: %s: %s", res.Status, body)
	}
}

// Watermarks returns how far each stage has got (GET /v1/watermarks).
func (c *Client) Watermarks(ctx context.Context) (map[string]any, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+PathWatermarks, nil)
	if err != nil {
		return nil, err
	}
	res, err := c.do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(res.Body)
		return nil, fmt.Errorf("decant: watermarks: %s: %s", res.Status, b)
	}
	var out map[string]any
	return out, json.NewDecoder(res.Body).Decode(&out)
}
