// Package status serves flowrun's status page (SPEC §15) and the small JSON API behind it: every
// pipeline's state and numbers, the topology drawn as SVG, and each pipeline's dead letters, with
// redrive and purge when the process runs with an admin token. It reads what it shows through
// the functions of Options at each request, so pipelines started or stopped by a reload show up
// without restarting the server; it asks Redis only for dead letters and actions, and takes the
// source numbers from the sampler that also feeds the Prometheus gauges.
package status

import (
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"encoding/json"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/config"
	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/transports"
)

//go:embed assets
var assets embed.FS

var page = template.Must(template.ParseFS(assets, "assets/index.html"))

// Options are where the page reads what it shows. Every function is called per request.
type Options struct {
	// Pipelines are the pipelines this process runs, as configured.
	Pipelines func() []*config.Pipeline
	// Engine reports the running pipelines (engine.Engine.Status).
	Engine func() []engine.PipelineStatus
	// Stats returns the last sample of a pipeline's source numbers and when it was read (false:
	// none yet, or a source without numbers).
	Stats func(pipeline string) (transports.Stats, time.Time, bool)
	// Refresh asks for a new sample of the source numbers soon (after a redrive or purge).
	Refresh func()
	// Env gives the Redis clients of a redis block, for dead letters and actions.
	Env func(redisBlock string) *transports.Env
	// Graph is the topology of `flowrun graph`.
	Graph func() Graph
	// Workflows are the workflows this process runs, with their runs (runs.go); nil: none.
	Workflows func() []Workflow
	// AdminToken enables redrive and purge; "" makes the page read-only.
	AdminToken string
	// SampleEvery is how often Stats is refreshed, shown on the page.
	SampleEvery time.Duration
	Logger      zerolog.Logger
}

type server struct {
	o      Options
	slots  *clientSlots // the filters running (budget.go)
	counts runCounts    // the runs per status, counted at most so often (runs.go)
	scans  *clientSlots // the lists of runs being read (runs.go)
}

// Handler serves the page at / and the API under /api/. Other paths are not found.
func Handler(o Options) http.Handler {
	s := &server{o: o, slots: filterSlots(), scans: scanSlots()}
	mux := http.NewServeMux()
	static, _ := fs.Sub(assets, "assets")
	mux.HandleFunc("GET /{$}", s.index)
	mux.Handle("GET /assets/", http.StripPrefix("/assets/", noIndex(http.FileServerFS(static))))
	mux.HandleFunc("GET /graph.svg", s.graphSVG)
	mux.HandleFunc("GET /api/status", s.status)
	mux.HandleFunc("GET /api/pipelines/{name}/dead-letters", s.deadLetters)
	mux.HandleFunc("POST /api/pipelines/{name}/dead-letters/redrive", s.admin(s.redrive))
	mux.HandleFunc("POST /api/pipelines/{name}/dead-letters/purge", s.admin(s.purge))
	s.runRoutes(mux)
	return Secure(mux)
}

// Secure sets the security headers on every response of h, errors and the JSON API included:
// the page's CSP (its own origin only, no inline script, no eval, no framing), nosniff, and no
// referrer. `run` wraps its whole HTTP server (metrics, health) in it too.
func Secure(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		securityHeaders(w)
		h.ServeHTTP(w, r)
	})
}

// noIndex answers a folder (or index.html) with 404 rather than a listing.
func noIndex(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "" || strings.HasSuffix(r.URL.Path, "/") || r.URL.Path == "index.html" {
			http.NotFound(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// csrfCookie holds the value a POST must repeat in the X-CSRF-Token header (a double-submit
// check: another site can make a browser send the cookie, but cannot read it to send it back).
const (
	csrfCookie = "flowrun_csrf"
	csrfHeader = "X-CSRF-Token"
)

func (s *server) index(w http.ResponseWriter, r *http.Request) {
	if _, err := r.Cookie(csrfCookie); err != nil {
		b := make([]byte, 16)
		rand.Read(b)
		http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: hex.EncodeToString(b), Path: "/", SameSite: http.SameSiteStrictMode})
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	err := page.Execute(w, map[string]any{
		"Graph": template.HTML(renderSVG(s.o.Graph())),
		"Admin": s.o.AdminToken != "",
	})
	if err != nil {
		s.o.Logger.Debug().Err(err).Msg("status page")
	}
}

// securityHeaders keep the page to its own assets: no external loads, no framing, no forms
// sent elsewhere, no plugins.
func securityHeaders(w http.ResponseWriter) {
	w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Referrer-Policy", "no-referrer")
}

func (s *server) graphSVG(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "image/svg+xml")
	w.Header().Set("Cache-Control", "no-store")
	w.Write([]byte(renderSVG(s.o.Graph())))
}

// pipelineJSON is one pipeline of GET /api/status. A number that does not apply to the source,
// or that has not been sampled yet, is null.
type pipelineJSON struct {
	Name   string `json:"name"`
	Source struct {
		Kind string `json:"kind"`
		Key  string `json:"key"`
	} `json:"source"`
	State            string             `json:"state"`
	Started          *time.Time         `json:"started"`
	Rate             float64            `json:"rate"`
	Rates            map[string]float64 `json:"rates"`
	Totals           map[string]int64   `json:"totals"`
	Inflight         int64              `json:"inflight"`
	Held             int64              `json:"held"`
	Lag              *int64             `json:"lag"`
	LagUnknown       bool               `json:"lag_unknown"`
	Pending          *int64             `json:"pending"`
	OldestPendingMS  *int64             `json:"oldest_pending_idle_ms"`
	Delayed          *int64             `json:"delayed"`
	DeadLetters      *int64             `json:"dead_letters"`
	DeadLetterKey    string             `json:"dead_letter_key"`
	DeadLetterAccess bool               `json:"dead_letters_browsable"`
	SampledAt        *time.Time         `json:"sampled_at"`
	NextTick         *time.Time         `json:"next_tick,omitempty"` // a schedule source's (schedule.go)
}

type statusJSON struct {
	Time           time.Time      `json:"time"`
	Admin          bool           `json:"admin"`
	SampleEveryS   float64        `json:"sample_every_s"`
	Outcomes       []string       `json:"outcomes"`
	Pipelines      []pipelineJSON `json:"pipelines"`
	GraphSignature string         `json:"graph_signature"`
}

func (s *server) status(w http.ResponseWriter, _ *http.Request) {
	running := map[string]engine.PipelineStatus{}
	for _, st := range s.o.Engine() {
		running[st.Name] = st
	}
	out := statusJSON{
		Time:         time.Now().UTC(),
		Admin:        s.o.AdminToken != "",
		SampleEveryS: s.o.SampleEvery.Seconds(),
		Outcomes:     engine.OutcomeLabels,
		Pipelines:    []pipelineJSON{},
	}
	shown := map[string]bool{}
	for _, p := range s.o.Pipelines() {
		shown[p.Name] = true
		out.Pipelines = append(out.Pipelines, s.card(Pipeline{Name: p.Name, Kind: p.Source.Kind, Key: p.Source.NaturalKey(),
			DeadLetter: p.DeadLetter, Source: p.Source.Config}, running, out.Time))
	}
	// then the workflows' pipelines (the start, each step's, each wait's events), after the files'
	for _, wf := range s.workflowList() {
		for _, p := range wf.Pipelines {
			if !shown[p.Name] {
				shown[p.Name] = true
				out.Pipelines = append(out.Pipelines, s.card(p, running, out.Time))
			}
		}
	}
	out.GraphSignature = graphSignature(s.o.Graph())
	writeJSON(w, http.StatusOK, out)
}

// Pipeline is an engine pipeline as its card shows it: its name, its source's kind and key, its
// dead letter ("" none shown) and its source's configuration (nil: none).
type Pipeline struct {
	Name, Kind, Key, DeadLetter string
	Source                      transports.Config
}

// card is a pipeline's card: what the engine and the sampler report of it.
func (s *server) card(p Pipeline, running map[string]engine.PipelineStatus, now time.Time) pipelineJSON {
	j := pipelineJSON{Name: p.Name, State: engine.StateStopped, DeadLetterKey: p.DeadLetter}
	j.Source.Kind, j.Source.Key = p.Kind, p.Key
	j.NextTick = nextTick(p.Source, now)
	if st, ok := running[p.Name]; ok {
		started := st.Started.UTC()
		j.State, j.Started, j.Rate, j.Rates, j.Totals, j.Inflight, j.Held =
			st.State, &started, st.Rate, st.Rates, st.Totals, st.Inflight, st.Held
	}
	if _, ok := p.Source.(transports.DeadLetterStore); ok && p.DeadLetter != "" {
		j.DeadLetterAccess = true
	}
	if st, at, ok := s.o.Stats(p.Name); ok {
		at = at.UTC()
		j.SampledAt = &at
		if st.Key != "" {
			j.Source.Key = st.Key
		}
		j.Lag = st.LagBound
		if j.Lag == nil {
			j.Lag = st.Lag
		}
		j.LagUnknown = st.LagUnknown
		j.Pending, j.Delayed, j.DeadLetters = st.Pending, st.Delayed, st.DeadLetters
		if st.OldestPendingIdle != nil {
			ms := st.OldestPendingIdle.Milliseconds()
			j.OldestPendingMS = &ms
		}
	}
	return j
}

// pipeline finds a configured pipeline by name.
func (s *server) pipeline(name string) *config.Pipeline {
	for _, p := range s.o.Pipelines() {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// admin guards a dead-letter action (guard).
func (s *server) admin(next http.HandlerFunc) http.HandlerFunc {
	return s.guard("dead letters cannot be redriven or purged here", next)
}

// guard guards every action: refused when the process has no admin token (saying that what
// cannot be done here), from another origin, without the CSRF check, or without the token.
func (s *server) guard(readOnly string, next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.o.AdminToken == "" {
			writeError(w, http.StatusForbidden, "read-only: flowrun runs without --admin-token, so "+readOnly)
			return
		}
		if !sameOrigin(r) {
			writeError(w, http.StatusForbidden, "cross-origin request refused")
			return
		}
		c, err := r.Cookie(csrfCookie)
		if err != nil || c.Value == "" || subtle.ConstantTimeCompare([]byte(c.Value), []byte(r.Header.Get(csrfHeader))) != 1 {
			writeError(w, http.StatusForbidden, "CSRF check failed: send the "+csrfCookie+" cookie's value in the "+csrfHeader+" header (reload the page)")
			return
		}
		token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(token), []byte(s.o.AdminToken)) != 1 {
			writeError(w, http.StatusUnauthorized, "wrong or missing admin token")
			return
		}
		next(w, r)
	}
}

// sameOrigin refuses a request a browser marks as coming from another site.
func sameOrigin(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return false
	}
	if o := r.Header.Get("Origin"); o != "" && o != "null" {
		u, err := url.Parse(o)
		if err != nil || u.Host != r.Host {
			return false
		}
	}
	return true
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
}

// errorJSON is every error answer of the API.
type errorJSON struct {
	Error string `json:"error"`
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, errorJSON{Error: msg})
}
