package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/ringlimit/ringlimit/fallback"
	"github.com/ringlimit/ringlimit/httplimit"
	"github.com/ringlimit/ringlimit/limiter"
)

// The JSON API: POST /v1/consume and POST /v1/peek.
//
// A decision, allowed or refused, is an answer: 200 with the verdict and
// the draft RateLimit headers (Retry-After too when refused), as Envoy's
// rate-limit service answers OK with an over-limit code. 4xx and 5xx are
// kept for errors of the API, each with an RFC 9457 problem body that
// names the field at fault.

// jsonEntry is an entry as the JSON API reads it: "limit" is "5/1m" or
// "token-bucket:100/1s" (with a burst: "token-bucket:100/1s,burst=500")
// or "fixed-window:1000/1mo"; "algorithm" overrides the limit's; "name" is
// the limit's Name (the metrics label); "debit" records "cost" as usage
// after the fact (limiter.Entry.Debit). The key stays
// raw until checkKey has seen it: encoding/json turns every invalid UTF-8
// byte and every lone surrogate into U+FFFD, which would make distinct
// inputs share one counter.
type jsonEntry struct {
	Key       json.RawMessage `json:"key"`
	Limit     string          `json:"limit"`
	Algorithm string          `json:"algorithm,omitempty"`
	Name      string          `json:"name,omitempty"`
	Cost      int64           `json:"cost,omitempty"`
	Debit     bool            `json:"debit,omitempty"`
}

type jsonRequest struct {
	Entries []jsonEntry `json:"entries"`
	// Release asks for a release_id in an allowed consume's answer, which
	// POST /v1/release on the same node gives back (json_release.go): the
	// slots of a concurrency limit, the uses of any other.
	Release bool `json:"release,omitempty"`
}

// JSONVerdict is a verdict as the JSON API and the CLI print it.
type JSONVerdict struct {
	Allowed      bool  `json:"allowed"`
	Remaining    int64 `json:"remaining"`
	RetryAfterMs int64 `json:"retry_after_ms"`
	RetryAtMs    int64 `json:"retry_at_ms"`
	ResetAtMs    int64 `json:"reset_at_ms"`
	// Shadowed: the node is in shadow mode (--shadow) and the call would
	// have been refused; allowed is true. Absent otherwise.
	Shadowed bool `json:"shadowed,omitempty"`
	// ReleaseID names the call's Release when the request asked for one
	// ("release": true) and the call was allowed: POST /v1/release with
	// it on the same node gives the call back. A decimal string (a JSON
	// number loses precision past 2^53). Absent otherwise.
	ReleaseID string `json:"release_id,omitempty"`
}

// VerdictJSON converts a verdict for printing (RetryAfter rounded up to
// whole ms).
func VerdictJSON(v limiter.Verdict) JSONVerdict {
	j := JSONVerdict{Allowed: v.Allowed, Remaining: v.Remaining, RetryAfterMs: int64((v.RetryAfter + time.Millisecond - 1) / time.Millisecond), Shadowed: v.Shadowed}
	if !v.RetryAt.IsZero() {
		j.RetryAtMs = v.RetryAt.UnixMilli()
	}
	if !v.ResetAt.IsZero() {
		j.ResetAtMs = v.ResetAt.UnixMilli()
	}
	return j
}

// problem is an RFC 9457 problem detail, as the httplimit middleware
// writes it, with the field at fault and the failure's correlation id as
// extension members.
type problem struct {
	Type          string `json:"type"`
	Title         string `json:"title"`
	Status        int    `json:"status"`
	Detail        string `json:"detail"`
	Instance      string `json:"instance"`
	Field         string `json:"field,omitempty"`
	CorrelationID string `json:"correlation_id,omitempty"`
}

// problemContentType is the media type of the JSON API's error bodies.
const problemContentType = "application/problem+json; charset=utf-8"

func (s *Server) serveJSON(w http.ResponseWriter, r *http.Request, peek bool) {
	entries, release, err := s.readJSON(w, r)
	if err != nil {
		writeProblem(w, r, err)
		return
	}
	var v limiter.Verdict
	switch {
	case peek:
		v, err = s.cfg.Node.PeekMany(r.Context(), entries)
	case release:
		v, err = s.cfg.Node.ConsumeMany(limiter.WithRelease(r.Context()), entries)
	default:
		v, err = s.cfg.Node.ConsumeMany(r.Context(), entries)
	}
	if err != nil {
		writeProblem(w, r, err)
		return
	}
	if v.Failure != nil && !fallback.IsLocal(v.Failure) {
		// The failure policy decided without counting: a deny is an
		// outage (503, as the middleware answers), an allow has no
		// figures to give.
		if !v.Allowed {
			writeProblem(w, r, v.Failure)
			return
		}
	} else {
		policies := make([]httplimit.Policy, len(entries))
		for i, e := range entries {
			policies[i] = httplimit.Policy{Name: "entries[" + strconv.Itoa(i) + "]", Limit: e.Limit}
		}
		httplimit.SetDraftHeaders(w.Header(), v, s.cfg.Clock.Now(), policies...)
	}
	j := VerdictJSON(v)
	if v.Release != nil {
		j.ReleaseID = strconv.FormatUint(s.releases.put(v.Release, v.ResetAt), 10)
	}
	WriteJSON(w, http.StatusOK, j)
}

// readJSON reads a request body into entries: at most MaxBodyBytes, one
// JSON object and nothing after it but white space, known fields only,
// keys that are valid UTF-8 without lone surrogates.
func (s *Server) readJSON(w http.ResponseWriter, r *http.Request) (entries []limiter.Entry, release bool, err error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, false, &limiter.InputError{Field: "body", Bound: true,
				Reason: fmt.Sprintf("larger than %d bytes (the node's --max-body-bytes)", mbe.Limit)}
		}
		return nil, false, &limiter.InputError{Field: "body", Reason: err.Error()}
	}
	var req jsonRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return nil, false, &limiter.InputError{Field: "body", Reason: err.Error()}
	}
	if end := dec.InputOffset(); len(bytes.TrimLeft(body[end:], " \t\r\n")) > 0 {
		// {...} xxx was counted, the rest ignored: a client that joined
		// two bodies, or a proxy that mangled one, must hear of it.
		return nil, false, &limiter.InputError{Field: "body", Reason: fmt.Sprintf("data after the JSON object at byte %d", end)}
	}
	entries = make([]limiter.Entry, len(req.Entries))
	for i, e := range req.Entries {
		field := "entries[" + strconv.Itoa(i) + "]"
		key, err := jsonKey(e.Key)
		if err != nil {
			return nil, false, &limiter.InputError{Field: field + ".key", Reason: err.Error()}
		}
		l, err := limiter.ParseLimit(e.Limit)
		if err == nil && e.Algorithm != "" {
			l.Algorithm, err = limiter.ParseAlgorithm(e.Algorithm)
		}
		if err != nil {
			return nil, false, prefixInputError(field, err)
		}
		l.Name = e.Name
		entries[i] = limiter.Entry{Key: key, Limit: l, Cost: e.Cost, Debit: e.Debit}
	}
	return entries, req.Release, nil
}

// jsonKey decodes an entry's key from its raw JSON. Absent is "" (which
// the store refuses as empty). A key must be a JSON string of Unicode
// characters: raw bytes that are not UTF-8 and \u escapes of lone
// surrogates are refused, since encoding/json would turn each of them into
// U+FFFD and so count "coll\xff", "coll\xfe" and "coll\ud800" in one
// counter. U+FFFD itself, raw or written \ufffd, is a character like any
// other and is accepted: the two spellings are one JSON string (as "a"
// and "\u0061" are), so they are one key, and no other input reaches it.
// Keys that are not text can be sent over gRPC, whose keys are bytes.
func jsonKey(raw json.RawMessage) (string, error) {
	if len(raw) == 0 {
		return "", nil
	}
	if raw[0] != '"' {
		return "", errors.New("must be a JSON string")
	}
	if !utf8.Valid(raw) {
		for i := 0; i < len(raw); {
			r, size := utf8.DecodeRune(raw[i:])
			if r == utf8.RuneError && size == 1 {
				return "", fmt.Errorf("must be valid UTF-8: byte 0x%02x at offset %d of the JSON string", raw[i], i-1)
			}
			i += size
		}
	}
	// The decoder has checked the literal's syntax: every \u has 4 hex
	// digits, and the closing quote is last.
	for i := 1; i < len(raw)-1; i++ {
		if raw[i] != '\\' {
			continue
		}
		i++
		if raw[i] != 'u' {
			continue
		}
		c := hex4(raw[i+1 : i+5])
		i += 4
		switch {
		case c >= 0xD800 && c < 0xDC00:
			if i+2 < len(raw)-1 && raw[i+1] == '\\' && raw[i+2] == 'u' {
				if lo := hex4(raw[i+3 : i+7]); lo >= 0xDC00 && lo < 0xE000 {
					i += 6 // a surrogate pair: one character
					continue
				}
			}
			return "", fmt.Errorf("must be valid Unicode: \\u%04x is a lone surrogate", c)
		case c >= 0xDC00 && c < 0xE000:
			return "", fmt.Errorf("must be valid Unicode: \\u%04x is a lone surrogate", c)
		}
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", err
	}
	return s, nil
}

// hex4 reads four hex digits (checked by the JSON decoder).
func hex4(b []byte) rune {
	var r rune
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

// prefixInputError names an input error's field inside prefix.
func prefixInputError(prefix string, err error) error {
	var ie *limiter.InputError
	if errors.As(err, &ie) {
		c := *ie
		c.Field = prefix + "." + c.Field
		return &c
	}
	return err
}

// writeProblem answers err with its status and a problem body: 400 for
// malformed input and 413 past a bound (naming the field), 501 for what
// the node's store cannot do (limiter.ErrUnsupported), 503 for the
// rest (a store that did not answer, a node not ready or shutting down),
// with the failure policy's correlation id when there is one.
func writeProblem(w http.ResponseWriter, r *http.Request, err error) {
	p := problem{Type: "about:blank", Status: http.StatusServiceUnavailable, Detail: err.Error(), Instance: r.URL.EscapedPath()}
	var ie *limiter.InputError
	var fe *fallback.FailureError
	switch {
	case errors.As(err, &ie):
		p.Status, p.Field, p.Detail = http.StatusBadRequest, ie.Field, ie.Field+": "+ie.Reason
		if ie.Bound {
			p.Status = http.StatusRequestEntityTooLarge
		}
	case errors.As(err, &fe):
		p.CorrelationID = fe.ID
		p.Detail = "rate limit store unavailable: " + err.Error()
	case errors.Is(err, limiter.ErrUnsupported):
		p.Status = http.StatusNotImplemented
	}
	p.Title = http.StatusText(p.Status)
	sendProblem(w, p)
}

// WriteStatusProblem answers status with a problem body saying detail:
// the HTTP port's refusals of a caller (security.go).
func WriteStatusProblem(w http.ResponseWriter, r *http.Request, status int, detail string) {
	sendProblem(w, problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: detail, Instance: r.URL.EscapedPath()})
}

func sendProblem(w http.ResponseWriter, p problem) {
	body, _ := json.Marshal(p) // strings and an int always marshal
	h := w.Header()
	h.Set("Content-Type", problemContentType)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(p.Status)
	_, _ = w.Write(body)
}

func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// Mount serves the JSON API on mux: POST /v1/consume, POST /v1/peek,
// POST /v1/reset (reset.go), POST /v1/release (json_release.go) and GET
// /v1/members.
func (s *Server) Mount(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/consume", func(w http.ResponseWriter, r *http.Request) { s.serveJSON(w, r, false) })
	mux.HandleFunc("POST /v1/peek", func(w http.ResponseWriter, r *http.Request) { s.serveJSON(w, r, true) })
	mux.HandleFunc("POST /v1/reset", s.serveReset)
	mux.HandleFunc("POST /v1/release", s.serveRelease) // json_release.go
	mux.HandleFunc("GET /v1/members", func(w http.ResponseWriter, r *http.Request) {
		type member struct {
			Name       string `json:"name"`
			GossipAddr string `json:"gossip_addr"`
			GRPCAddr   string `json:"grpc_addr"`
			State      string `json:"state"`
		}
		out := []member{}
		for _, m := range s.cfg.Node.Members() {
			out = append(out, member{m.Name, m.GossipAddr, m.GRPCAddr, m.State})
		}
		WriteJSON(w, http.StatusOK, out)
	})
}
