package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/ringlimit/ringlimit/limiter"
)

// POST /v1/release {"release_id": "123"} gives back the call a consume
// with "release": true answered with that release_id (on this node): the
// slots of a concurrency limit ("concurrency:10/30s"), the uses of any
// other limit. 200 {} whether or not the id was still known: a release is
// idempotent, and an id whose uses have left their windows (or slots
// their TTL) has nothing left to give back.

type jsonRelease struct {
	ReleaseID string `json:"release_id"`
}

func (s *Server) serveRelease(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeProblem(w, r, &limiter.InputError{Field: "body", Bound: true,
				Reason: fmt.Sprintf("larger than %d bytes (the node's --max-body-bytes)", mbe.Limit)})
			return
		}
		writeProblem(w, r, &limiter.InputError{Field: "body", Reason: err.Error()})
		return
	}
	var req jsonRelease
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeProblem(w, r, &limiter.InputError{Field: "body", Reason: err.Error()})
		return
	}
	id, err := strconv.ParseUint(req.ReleaseID, 10, 64)
	if err != nil {
		writeProblem(w, r, &limiter.InputError{Field: "release_id", Reason: fmt.Sprintf("%q is not a release id (a decimal string)", req.ReleaseID)})
		return
	}
	if err := s.releases.release(r.Context(), id); err != nil {
		writeProblem(w, r, err)
		return
	}
	WriteJSON(w, http.StatusOK, struct{}{})
}
