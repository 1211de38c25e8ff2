package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/client"
	"github.com/flowforge/flowforge/core/store"
)

// sendEventRequest is the body of POST /v1/events/{name}, as `ffctl event
// send NAME --key K --payload JSON --id ID --event-lookback D` takes it:
// every field optional (absent payload: {}; absent id: a new UUID;
// absent lookback: 24h). lookback is a duration with days ("7d",
// core.ParseDuration).
type sendEventRequest struct {
	Key      string          `json:"key"`
	Payload  json.RawMessage `json:"payload"`
	ID       string          `json:"id"`
	Lookback string          `json:"lookback"`
}

// sendEvent sends the event {name}: 200 with what the send did
// (client.SendEventResult: the event, duplicate, the task runs it
// completed), also for an id received before (duplicate true, nothing
// sent again). Operator: like a trigger, it moves runs on.
func (s *Server) sendEvent(w http.ResponseWriter, r *http.Request) {
	var req sendEventRequest
	if err := decodeCommand(w, r, s.cfg.BodyMax, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	opts := client.SendEventOptions{Key: req.Key, ID: req.ID, Actor: actorOf(r.Context())}
	if req.Lookback != "" {
		d, err := core.ParseDuration(req.Lookback)
		if err != nil {
			s.writeError(w, r, badInput(fmt.Sprintf("lookback: %v", err)))
			return
		}
		if store.ValidateEventLookback(d) != nil {
			s.writeError(w, r, badInput(fmt.Sprintf("lookback %q: must be positive and at most %dd, such as 24h or 7d (leave it out for 24h)", req.Lookback, store.EventLookbackMax/(24*time.Hour))))
			return
		}
		opts.Lookback = d
	}
	var payload any // nil: {}
	if req.Payload != nil {
		payload = req.Payload
	}
	res, err := s.cfg.Client.SendEvent(r.Context(), r.PathValue("name"), payload, opts)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.audit(r, "api: send event", "event", res.Event.Name, "event_id", res.Event.ID, "duplicate", res.Duplicate, "completed", len(res.Completed))
	writeJSON(w, http.StatusOK, res)
}

// listEvents answers the events the query selects (name, key, limit),
// newest first, each with its deliveries, as `ffctl event list -o json`.
func (s *Server) listEvents(w http.ResponseWriter, r *http.Request) {
	s.serveList(w, r, func(q url.Values, limit int) (any, error) {
		f := client.EventFilter{Name: q.Get("name"), Limit: limit}
		if q.Has("key") {
			key := q.Get("key")
			f.Key = &key
		}
		return s.cfg.Client.ListEvents(r.Context(), f)
	}, "name", "key")
}
