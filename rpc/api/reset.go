package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/rpc"
	pb "github.com/ringlimit/ringlimit/rpc/ringlimitv1"
)

// Reset forgets counters at the nodes counting them (limiter.Resetter on
// the node). A node whose store cannot reset answers UNIMPLEMENTED; bad
// input INVALID_ARGUMENT naming the field ("keys[1]", "limits[0].window").
func (s *Server) Reset(ctx context.Context, req *pb.ResetRequest) (*pb.ResetResponse, error) {
	keys, limits := rpc.ResetFromPB(req)
	if err := limiter.Reset(ctx, s.cfg.Node, keys, limits...); err != nil {
		return nil, rpc.ToStatus(err)
	}
	return &pb.ResetResponse{}, nil
}

// jsonReset is POST /v1/reset's body: keys (JSON strings, read as
// jsonKey reads an entry's) and, optionally, the limits naming the
// counters to forget ("5/1m", "token-bucket:100/1s"); none: every counter
// of each key.
type jsonReset struct {
	Keys   []json.RawMessage `json:"keys"`
	Limits []string          `json:"limits,omitempty"`
}

// JSONResetResult is POST /v1/reset's answer.
type JSONResetResult struct {
	// Reset is the number of keys whose counters were forgotten.
	Reset int `json:"reset"`
}

// serveReset answers POST /v1/reset: 200 {"reset": n} once every key's
// counters are forgotten; 400 naming the field for bad input; 501 when the
// node's store cannot reset; 503 when an owner could not be reached (a
// reset is idempotent: retry it).
func (s *Server) serveReset(w http.ResponseWriter, r *http.Request) {
	keys, limits, err := s.readReset(w, r)
	if err == nil {
		err = limiter.Reset(r.Context(), s.cfg.Node, keys, limits...)
	}
	if err != nil {
		writeProblem(w, r, err)
		return
	}
	WriteJSON(w, http.StatusOK, JSONResetResult{Reset: len(keys)})
}

func (s *Server) readReset(w http.ResponseWriter, r *http.Request) ([]string, []limiter.Limit, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, nil, &limiter.InputError{Field: "body", Bound: true,
				Reason: fmt.Sprintf("larger than %d bytes (the node's --max-body-bytes)", mbe.Limit)}
		}
		return nil, nil, &limiter.InputError{Field: "body", Reason: err.Error()}
	}
	var req jsonReset
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return nil, nil, &limiter.InputError{Field: "body", Reason: err.Error()}
	}
	if end := dec.InputOffset(); len(bytes.TrimLeft(body[end:], " \t\r\n")) > 0 {
		return nil, nil, &limiter.InputError{Field: "body", Reason: fmt.Sprintf("data after the JSON object at byte %d", end)}
	}
	keys := make([]string, len(req.Keys))
	for i, raw := range req.Keys {
		k, err := jsonKey(raw)
		if err != nil {
			return nil, nil, &limiter.InputError{Field: "keys[" + strconv.Itoa(i) + "]", Reason: err.Error()}
		}
		keys[i] = k
	}
	limits := make([]limiter.Limit, len(req.Limits))
	for i, text := range req.Limits {
		l, err := limiter.ParseLimit(text)
		if err != nil {
			return nil, nil, prefixInputError("limits["+strconv.Itoa(i)+"]", err)
		}
		limits[i] = l
	}
	return keys, limits, nil
}
