package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/flowforge/flowforge/core/client"
	"github.com/flowforge/flowforge/core/store"
)

// The codes of the error object, one per kind of refusal, with the status
// each goes with.
const (
	CodeInvalidInput     = "invalid_input"          // 400: a malformed id, name, filter, option, body or field
	CodeInvalidParams    = "invalid_params"         // 400: a run's params (or its idempotency key) refused
	CodeUnauthenticated  = "unauthenticated"        // 401: no token, or one refused (malformed, unknown, revoked, expired)
	CodeForbidden        = "forbidden"              // 403: the token's role may not do this
	CodeNotFound         = "not_found"              // 404: no such workflow, run, task or route
	CodeMethodNotAllowed = "method_not_allowed"     // 405: the route has no such method (Allow lists those it has)
	CodeTimeout          = "timeout"                // 408: a wait ended before the run did
	CodeConflict         = "conflict"               // 409: contradicts what is stored (a key of another run, a run ended, a task not DEAD)
	CodePaused           = "paused"                 // 409: the workflow is paused with mode drop: no run was created
	CodeTooLarge         = "too_large"              // 413: the body is over its limit
	CodeUnsupportedMedia = "unsupported_media_type" // 415: a body that is not JSON where JSON is read
	CodeTooManyRequests  = "too_many_requests"      // 429: too many failed authentications from this address
	CodeInternal         = "internal"               // 500: a fault of the server (logged, not described)
	CodeUnavailable      = "unavailable"            // 503: the database does not answer, or a write's outcome is unknown
)

// errorBody is the one shape of every error the API answers:
// {"error": {"code": "...", "message": "..."}}.
type errorBody struct {
	Error errorObject `json:"error"`
}

type errorObject struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// apiError is a refusal the API makes itself: its status, code and
// message.
type apiError struct {
	status  int
	code    string
	message string
}

func (e *apiError) Error() string { return e.message }

// badInput is a 400 invalid_input with message.
func badInput(message string) *apiError {
	return &apiError{status: http.StatusBadRequest, code: CodeInvalidInput, message: message}
}

// classify returns the status, code and message of err, an error of a
// route: an *apiError as it is; the client's errors by kind, their text
// the message (ffctl prints the same); the database out of reach or a
// commit unanswered as 503; anything else a 500 whose message says
// nothing of it (internal reports it, for the log).
func classify(err error) (status int, code, message string, internal bool) {
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		return ae.status, ae.code, ae.message, false
	case errors.Is(err, client.ErrUnauthenticated):
		return http.StatusUnauthorized, CodeUnauthenticated, err.Error(), false
	case errors.Is(err, client.ErrInvalidParams):
		return http.StatusBadRequest, CodeInvalidParams, err.Error(), false
	case errors.Is(err, client.ErrInvalidInput):
		return http.StatusBadRequest, CodeInvalidInput, err.Error(), false
	case errors.Is(err, client.ErrNotFound):
		return http.StatusNotFound, CodeNotFound, err.Error(), false
	case errors.Is(err, client.ErrPaused):
		return http.StatusConflict, CodePaused, err.Error(), false
	case errors.Is(err, client.ErrConflict):
		return http.StatusConflict, CodeConflict, err.Error(), false
	case errors.Is(err, client.ErrOutcomeUnknown):
		return http.StatusServiceUnavailable, CodeUnavailable, err.Error(), false
	case errors.Is(err, store.ErrSchemaOutdated):
		return http.StatusServiceUnavailable, CodeUnavailable, err.Error(), true
	case store.IsUnreachable(err), errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable, CodeUnavailable, "the database does not answer; try again", true
	}
	return http.StatusInternalServerError, CodeInternal, "internal error (logged by the server)", true
}

// writeError answers err in the error shape (see classify), logging what
// the server should know of.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	status, code, message, internal := classify(err)
	if internal {
		s.cfg.Logger.Error("api: request failed", "method", r.Method, "path", r.URL.Path, "status", status, "error", err)
	}
	writeJSON(w, status, errorBody{Error: errorObject{Code: code, Message: message}})
}

// writeJSON answers v as JSON with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // a client gone away: nothing to do
}
