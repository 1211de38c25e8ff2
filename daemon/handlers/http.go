package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/flowforge/flowforge/core"
)

// HTTPBodyLimit bounds the response body kept in the result (64 KiB).
const HTTPBodyLimit = 64 << 10

// HTTPParams are the http handler's params.
type HTTPParams struct {
	URL     string            `json:"url"`
	Method  string            `json:"method"` // default POST
	Headers map[string]string `json:"headers"`
	// Body is sent as JSON; absent means the task itself: {"run_id",
	// "task_run_id", "task", "attempt", "params", "upstream"}.
	Body json.RawMessage `json:"body"`
}

// HTTPResult is the http handler's result.
type HTTPResult struct {
	Status int    `json:"status"`
	Body   string `json:"body"`
}

// HTTP returns the http handler: it sends a JSON request with the task's
// idempotency key (if any) in the Idempotency-Key header. 2xx/3xx succeed;
// 4xx are permanent; 5xx and network errors are retried; an address the
// client refuses (a *DeniedAddressError, see NewHTTPClient) is permanent.
func HTTP(client *http.Client) core.Handler {
	return func(ctx context.Context, t core.Task) (json.RawMessage, error) {
		var p HTTPParams
		if err := decodeParams(t.Params, &p); err != nil {
			return nil, err
		}
		if !strings.HasPrefix(p.URL, "http://") && !strings.HasPrefix(p.URL, "https://") {
			return nil, core.Permanent(fmt.Errorf("http: params.url %q is not an http(s) URL", p.URL))
		}
		method := p.Method
		if method == "" {
			method = http.MethodPost
		}
		body := []byte(p.Body)
		if len(body) == 0 {
			body, _ = json.Marshal(map[string]any{
				"run_id": t.RunID, "task_run_id": t.TaskRunID, "task": t.TaskName, "attempt": t.Attempt,
				"params": t.RunParams, "upstream": t.Upstream,
			})
		}
		req, err := http.NewRequestWithContext(ctx, method, p.URL, bytes.NewReader(body))
		if err != nil {
			return nil, core.Permanent(fmt.Errorf("http: %w", err))
		}
		req.Header.Set("Content-Type", "application/json")
		for k, v := range p.Headers {
			req.Header.Set(k, v)
		}
		if t.IdempotencyKey != "" {
			req.Header.Set("Idempotency-Key", t.IdempotencyKey)
		}
		resp, err := client.Do(req)
		if err != nil {
			if isDenied(err) {
				return nil, core.Permanent(fmt.Errorf("http: %w", err))
			}
			return nil, fmt.Errorf("http: %w", err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, HTTPBodyLimit))
		res := HTTPResult{Status: resp.StatusCode, Body: core.SanitizeText(string(b), HTTPBodyLimit)}
		switch {
		case resp.StatusCode >= 500:
			return nil, fmt.Errorf("http: %s %s: status %d: %s", method, p.URL, resp.StatusCode, core.SanitizeText(string(b), 512))
		case resp.StatusCode >= 400:
			return nil, core.Permanent(fmt.Errorf("http: %s %s: status %d: %s", method, p.URL, resp.StatusCode, core.SanitizeText(string(b), 512)))
		}
		return json.Marshal(res)
	}
}
