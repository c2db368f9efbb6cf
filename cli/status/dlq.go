package status

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/flowrun/flowrun/config"
	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/rules"
	"github.com/flowrun/flowrun/transports"
)

// Paging of GET /api/pipelines/{name}/dead-letters.
const (
	defaultPage = 20
	maxPage     = 200
	// dlqTimeout bounds one dead-letter request; a filter walks every letter.
	dlqTimeout = 30 * time.Second
)

// letterJSON is one dead letter, whole.
type letterJSON struct {
	// Ref names the letter for a redrive or purge of selected letters: "id:" and its stream
	// entry id, or, where letters have no id (a list), "sha256:" and a digest of its headers
	// and payload.
	Ref      string            `json:"ref"`
	ID       string            `json:"id,omitempty"`
	Key      string            `json:"key"` // x-original-key, or the dead-letter key
	Headers  map[string]string `json:"headers"`
	Payload  string            `json:"payload"`
	JSON     string            `json:"payload_json,omitempty"` // the payload pretty-printed, when it is JSON
	Reason   string            `json:"reason"`
	FailedAt string            `json:"failed_at"`
	Attempts string            `json:"attempts"`
}

type lettersJSON struct {
	Pipeline      string       `json:"pipeline"`
	DeadLetterKey string       `json:"dead_letter_key"`
	Order         string       `json:"order"`
	Offset        int          `json:"offset"`
	Limit         int          `json:"limit"`
	Total         int64        `json:"total"` // letters the filter selects (all without one)
	Where         string       `json:"where"`
	Failed        int          `json:"where_failed"` // letters the filter failed on (not matching)
	FailedFirst   string       `json:"where_failed_first,omitempty"`
	Letters       []letterJSON `json:"letters"`
}

// whereErrorJSON is a filter that does not compile, with its position in the expression.
type whereErrorJSON struct {
	Error  string `json:"error"`
	Where  string `json:"where"`
	Line   int    `json:"line"`
	Column int    `json:"column"`
}

// store finds the pipeline and its dead letters, or answers the request with why not.
func (s *server) store(w http.ResponseWriter, r *http.Request) (*config.Pipeline, transports.DeadLetterStore, bool) {
	name := r.PathValue("name")
	p := s.pipeline(name)
	if p == nil {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no pipeline %q", name))
		return nil, nil, false
	}
	store, ok := p.Source.Config.(transports.DeadLetterStore)
	if !ok {
		where := "cannot be reached from here"
		if l, ok := p.Source.Config.(transports.DeadLetterLocator); ok {
			where = "are " + l.DeadLettersAt()
		}
		writeError(w, http.StatusNotFound, fmt.Sprintf("pipeline %q has a %s source, whose dead letters %s", name, p.Source.Kind, where))
		return nil, nil, false
	}
	if p.DeadLetter == "" {
		writeError(w, http.StatusNotFound, fmt.Sprintf("pipeline %q has no dead_letter", name))
		return nil, nil, false
	}
	return p, store, true
}

// filter compiles a where expression ("" : none) under its budget (budget.go), or answers the
// request with its error. deadline (zero: none) ends a walk that runs past it.
func filter(w http.ResponseWriter, where string, deadline time.Time) (*countingFilter, bool) {
	if where == "" {
		return nil, true
	}
	if err := checkWhere(where); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return nil, false
	}
	f, err := rules.CompileFilter(where)
	if err == nil && !deadline.IsZero() && time.Now().After(deadline) {
		err = errFilterTime
		writeError(w, http.StatusBadRequest, err.Error())
		return nil, false
	}
	if err != nil {
		e := whereErrorJSON{Error: err.Error(), Where: where}
		var re *rules.Error
		if errors.As(err, &re) {
			e.Line, e.Column, e.Error = re.Line, re.Column, re.Message
		}
		writeJSON(w, http.StatusBadRequest, e)
		return nil, false
	}
	f.SetMemoryBudget(filterMemory)
	return &countingFilter{f: f, deadline: deadline}, true
}

// countingFilter is a compiled where; a letter it fails on does not match (as in `flowrun dlq`)
// and is counted.
type countingFilter struct {
	f        *rules.Filter
	deadline time.Time // zero: none
	failed   int
	first    string
}

// match is the filter on one letter; its error (the time or memory budget) ends the walk.
func (c *countingFilter) match(m *engine.Message) (bool, error) {
	if !c.deadline.IsZero() && time.Now().After(c.deadline) {
		return false, errFilterTime
	}
	ok, err := c.f.Match(m)
	if fault := budgetFault(err); fault != nil {
		return false, fault
	}
	if err != nil {
		c.failed++
		if c.first == "" {
			c.first = err.Error()
		}
		return false, nil
	}
	return ok, nil
}

// matcher is c's match, or nil without a filter.
func (c *countingFilter) matcher() func(*engine.Message) (bool, error) {
	if c == nil {
		return nil
	}
	return c.match
}

func (s *server) deadLetters(w http.ResponseWriter, r *http.Request) {
	p, store, ok := s.store(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	order := q.Get("order")
	if order == "" {
		order = "newest"
	}
	if order != "newest" && order != "oldest" {
		writeError(w, http.StatusBadRequest, "order: want newest or oldest")
		return
	}
	offset, err1 := intParam(q.Get("offset"), 0)
	limit, err2 := intParam(q.Get("limit"), defaultPage)
	if err := errors.Join(err1, err2); err != nil || offset < 0 || limit < 1 {
		writeError(w, http.StatusBadRequest, "offset and limit: want whole numbers, offset 0 or more, limit 1 or more")
		return
	}
	limit = min(limit, maxPage)
	where := q.Get("where")
	var deadline time.Time
	if where != "" {
		release, err := s.slots.take(r)
		if err != nil {
			writeError(w, http.StatusTooManyRequests, err.Error())
			return
		}
		defer release()
		deadline = time.Now().Add(filterTime)
	}
	f, ok := filter(w, where, deadline)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), dlqTimeout)
	defer cancel()
	env := s.o.Env(p.Source.Redis)
	out := lettersJSON{Pipeline: p.Name, DeadLetterKey: p.DeadLetter, Order: order, Offset: offset, Limit: limit,
		Where: where, Letters: []letterJSON{}}

	if pager, ok := store.(transports.DeadLetterPager); ok && f == nil {
		// without a filter, a store that can reads just the page
		rows, total, err := pager.PageDeadLetters(ctx, env, order == "newest", offset, limit)
		if err != nil {
			writeError(w, http.StatusBadGateway, fmt.Sprintf("dead letters of %s: %v", p.Name, err))
			return
		}
		out.Total = total
		for _, row := range rows {
			out.Letters = append(out.Letters, letter(row))
		}
		writeJSON(w, http.StatusOK, out)
		return
	}

	// How many the filter selects in all, then the page of them: the stores walk oldest first,
	// so a page counted from the newest end is found by its place from the oldest.
	_, total, err := store.ListDeadLetters(ctx, env, transports.DeadLetterQuery{Limit: 1, Match: f.matcher()})
	if walkFailed(w, p, err) {
		return
	}
	lo := offset
	if order == "newest" {
		lo = int(total) - offset - limit
	}
	hi := lo + limit
	lo = max(lo, 0)
	out.Total = total
	if f != nil {
		out.Failed, out.FailedFirst = f.failed, f.first
	}
	if hi > lo {
		rows, _, err := store.ListDeadLetters(ctx, env, pageQuery(f, lo, hi))
		if walkFailed(w, p, err) {
			return
		}
		for _, row := range rows {
			out.Letters = append(out.Letters, letter(row))
		}
		if order == "newest" {
			for i, j := 0, len(out.Letters)-1; i < j; i, j = i+1, j-1 {
				out.Letters[i], out.Letters[j] = out.Letters[j], out.Letters[i]
			}
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// pageQuery selects the letters lo to hi (from the oldest) of those f selects (all without it):
// letters before the page are walked and not selected.
func pageQuery(f *countingFilter, lo, hi int) transports.DeadLetterQuery {
	query := transports.DeadLetterQuery{Limit: hi - lo}
	if lo == 0 && f == nil {
		return query
	}
	var pass *countingFilter
	if f != nil {
		pass = &countingFilter{f: f.f, deadline: f.deadline}
	}
	i := 0
	query.Match = func(m *engine.Message) (bool, error) {
		if pass != nil {
			if ok, err := pass.match(m); !ok {
				return false, err
			}
		}
		i++
		return i-1 >= lo && i-1 < hi, nil
	}
	return query
}

// walkFailed answers a walk over the letters that failed: 400 naming the limit when the
// filter's budget ended it, else 502 with Redis's error.
func walkFailed(w http.ResponseWriter, p *config.Pipeline, err error) bool {
	if err == nil {
		return false
	}
	for _, limit := range []error{errFilterTime, errFilterMemory} {
		if errors.Is(err, limit) {
			writeError(w, http.StatusBadRequest, limit.Error())
			return true
		}
	}
	writeError(w, http.StatusBadGateway, fmt.Sprintf("dead letters of %s: %v", p.Name, err))
	return true
}

func intParam(s string, def int) (int, error) {
	if s == "" {
		return def, nil
	}
	return strconv.Atoi(s)
}

func letter(row transports.DeadLetter) letterJSON {
	m := row.Message
	h := m.Headers
	if h == nil {
		h = map[string]string{}
	}
	l := letterJSON{
		Ref: ref(row), ID: row.ID, Key: m.Key, Headers: h, Payload: string(m.Payload),
		Reason: h[engine.HeaderDeadLetterReason], FailedAt: h[engine.HeaderFailedAt], Attempts: h[engine.HeaderAttempts],
	}
	if k := h[engine.HeaderOriginalKey]; k != "" {
		l.Key = k
	}
	if json.Valid(m.Payload) {
		var b bytes.Buffer
		if json.Indent(&b, m.Payload, "", "  ") == nil {
			l.JSON = b.String()
		}
	}
	return l
}

// ref names a letter for a later action: by its id where it has one, else by its content.
func ref(row transports.DeadLetter) string {
	if row.ID != "" {
		return "id:" + row.ID
	}
	return contentRef(row.Message)
}

func contentRef(m *engine.Message) string {
	if m.ID != "" {
		return "id:" + m.ID
	}
	keys := make([]string, 0, len(m.Headers))
	for k := range m.Headers {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	h := sha256.New()
	for _, k := range keys {
		fmt.Fprintf(h, "%d:%s%d:%s", len(k), k, len(m.Headers[k]), m.Headers[k])
	}
	h.Write([]byte{0})
	h.Write(m.Payload)
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// actionJSON is the body of a redrive or purge: the letters named by refs, or with all set,
// every letter where selects (every letter without it).
type actionJSON struct {
	Refs  []string `json:"refs"`
	All   bool     `json:"all"`
	Where string   `json:"where"`
}

// actionResult says what an action did.
type actionResult struct {
	Action  string `json:"action"` // "redrive" or "purge"
	Count   int    `json:"count"`
	Target  string `json:"target,omitempty"` // where a redrive moved them
	Message string `json:"message"`
	Error   string `json:"error,omitempty"`
}

// selection turns an action's body into a query, or answers the request with why not.
func selection(w http.ResponseWriter, r *http.Request) (transports.DeadLetterQuery, bool) {
	var a actionJSON
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&a); err != nil {
		writeError(w, http.StatusBadRequest, "body: want JSON {\"refs\": [...]} or {\"all\": true, \"where\": \"...\"}: "+err.Error())
		return transports.DeadLetterQuery{}, false
	}
	switch {
	case a.All && len(a.Refs) > 0:
		writeError(w, http.StatusBadRequest, "body: refs or all, not both")
	case a.All:
		// the admin's filter: the size, nesting and memory budget, not the time (a redrive
		// cut short part-way would leave the letters split for no reason)
		f, ok := filter(w, a.Where, time.Time{})
		if !ok {
			return transports.DeadLetterQuery{}, false
		}
		return transports.DeadLetterQuery{Match: f.matcher()}, true
	case len(a.Refs) > 0:
		want := map[string]int{}
		for _, r := range a.Refs {
			want[r]++
		}
		// Each ref selects one letter: two letters of a list with the same content are two refs.
		return transports.DeadLetterQuery{Limit: len(a.Refs), Match: func(m *engine.Message) (bool, error) {
			r := contentRef(m)
			if want[r] > 0 {
				want[r]--
				return true, nil
			}
			return false, nil
		}}, true
	default:
		writeError(w, http.StatusBadRequest, "body: select letters with refs, or all matching with all")
	}
	return transports.DeadLetterQuery{}, false
}

// actionTarget finds the pipeline and the dead letters an action works on, or answers the
// request with why it cannot; a redrive needs a source that can take its letters back.
func (s *server) actionTarget(w http.ResponseWriter, r *http.Request, redrive bool) (*config.Pipeline, transports.DeadLetterStore, transports.DeadLetterQuery, bool) {
	p, store, ok := s.store(w, r)
	if !ok {
		return nil, nil, transports.DeadLetterQuery{}, false
	}
	if redrive {
		if err := store.CheckRedrive(); err != nil {
			writeError(w, http.StatusConflict, fmt.Sprintf("pipeline %q %v", p.Name, err))
			return nil, nil, transports.DeadLetterQuery{}, false
		}
	}
	q, ok := selection(w, r)
	return p, store, q, ok
}

func (s *server) redrive(w http.ResponseWriter, r *http.Request) {
	p, store, q, ok := s.actionTarget(w, r, true)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), dlqTimeout)
	defer cancel()
	moved, target, err := store.RedriveDeadLetters(ctx, s.o.Env(p.Source.Redis), q)
	s.o.Refresh()
	res := actionResult{Action: "redrive", Count: moved, Target: target,
		Message: fmt.Sprintf("%d redriven to %s", moved, target)}
	s.o.Logger.Info().Str(engine.FieldPipeline, p.Name).Int("count", moved).Str("target", target).Msg("status page: dead letters redriven")
	writeAction(w, res, err)
}

// writeAction answers an action: 200 with its result, or 502 with Redis's error beside what
// was done before it (a redrive or purge that failed half-way reports both).
func writeAction(w http.ResponseWriter, res actionResult, err error) {
	status := http.StatusOK
	if err != nil {
		res.Error, status = err.Error(), http.StatusBadGateway
	}
	writeJSON(w, status, res)
}

func (s *server) purge(w http.ResponseWriter, r *http.Request) {
	p, store, q, ok := s.actionTarget(w, r, false)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), dlqTimeout)
	defer cancel()
	deleted, err := store.PurgeDeadLetters(ctx, s.o.Env(p.Source.Redis), q)
	s.o.Refresh()
	res := actionResult{Action: "purge", Count: deleted, Message: fmt.Sprintf("%d purged from %s", deleted, p.DeadLetter)}
	s.o.Logger.Info().Str(engine.FieldPipeline, p.Name).Int("count", deleted).Str("key", p.DeadLetter).Msg("status page: dead letters purged")
	writeAction(w, res, err)
}
