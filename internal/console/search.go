package console

import (
	"context"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/subjects"
)

// Outcome and incident search: a scan of the outcome (or incident) stream
// by batched direct gets on the subject filter the query allows — a host's
// outcomes, a phase's events — keeping what matches the kind and code.
// Newest first (the default) it reads backward from the window's end (or
// before a sequence, to continue), a chunk of sequences at a time; oldest
// first (?order=oldest) forward from its start (or after a sequence). A
// scan reads at most searchScan messages; when it stops early the page
// offers to continue from the last one read.

const (
	// searchScan bounds the messages one search reads; searchSpan the
	// stream sequences a newest-first scan steps back over (it reads a
	// chunk of sequences at a time, on the filter: a host's outcomes may
	// be few among many).
	searchScan = 10_000
	searchSpan = 100_000
	// DefaultSearchLimit is how many matches a page shows by default, at
	// most maxSearchLimit.
	defaultSearchLimit = 50
	maxSearchLimit     = 500
	// defaultSearchWindow is how far back a search looks by default.
	defaultSearchWindow = 24 * time.Hour
)

// Search targets.
const (
	searchOutcomes  = "outcomes"
	searchIncidents = "incidents"
)

// searchQuery is a search form's values.
type searchQuery struct {
	What        string // searchOutcomes or searchIncidents
	Host        string
	Kind        schema.Kind
	Code        schema.Code
	Phase       schema.Phase
	From, Until time.Time
	// Oldest: oldest first, continuing After a sequence; else newest
	// first, continuing Before one.
	Oldest        bool
	After, Before uint64
	Limit         int
}

// found is one match.
type found struct {
	Seq        uint64
	Time       time.Time
	Host       string
	ProposalID string
	Outcome    *schema.Outcome
	Event      *schema.IncidentEvent
}

// searchResult is a search's page.
type searchResult struct {
	Matches []found
	Scanned int
	// Next, when not 0, continues the scan from this sequence (after it
	// oldest first, before it newest first): the scan stopped at its bound
	// or at the page's limit before the window's end.
	Next uint64
}

// parseSearch reads a search form; problems are value-free messages.
func parseSearch(v url.Values, now time.Time) (searchQuery, []string) {
	q := searchQuery{What: searchOutcomes, Limit: defaultSearchLimit, Until: now, From: now.Add(-defaultSearchWindow)}
	var problems []string
	if w := v.Get("what"); w == searchIncidents {
		q.What = w
	} else if w != "" && w != searchOutcomes {
		problems = append(problems, "search outcomes or incidents")
	}
	if h := v.Get("host"); h != "" {
		if !subjects.ValidHost(h) {
			problems = append(problems, "a host name is 1–64 of A-Z a-z 0-9 _ -")
		} else {
			q.Host = h
		}
	}
	q.Kind = closed(v.Get("kind"), schema.Kinds(), "unknown outcome kind", &problems)
	q.Code = closed(v.Get("code"), codeNames(), "unknown code", &problems)
	q.Phase = closed(v.Get("phase"), schema.Phases(), "unknown phase", &problems)
	for _, t := range []struct {
		name string
		to   *time.Time
	}{{"from", &q.From}, {"until", &q.Until}} {
		s := v.Get(t.name)
		if s == "" {
			continue
		}
		at, err := parseTime(s)
		if err != nil {
			problems = append(problems, t.name+": a time as 2006-01-02T15:04 (UTC)")
			continue
		}
		*t.to = at
	}
	switch o := v.Get("order"); o {
	case "", orderNewest:
	case orderOldest:
		q.Oldest = true
	default:
		problems = append(problems, "order: newest or oldest")
	}
	for _, p := range []struct {
		name string
		to   *uint64
	}{{"after", &q.After}, {"before", &q.Before}} {
		if s := v.Get(p.name); s != "" {
			n, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				problems = append(problems, p.name+": a stream sequence")
			}
			*p.to = n
		}
	}
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxSearchLimit {
			problems = append(problems, "limit: 1–"+strconv.Itoa(maxSearchLimit))
		} else {
			q.Limit = n
		}
	}
	if !q.From.Before(q.Until) {
		problems = append(problems, "from must be before until")
	}
	return q, problems
}

// closed reads a value of a closed set: "" when absent; a value outside
// the set adds the problem.
func closed[T ~string](s string, set []T, problem string, problems *[]string) T {
	if s == "" {
		return ""
	}
	if !slices.Contains(set, T(s)) {
		*problems = append(*problems, problem)
		return ""
	}
	return T(s)
}

// codeNames lists every closed code once, in the table's order.
func codeNames() []schema.Code {
	var out []schema.Code
	for _, c := range schema.Codes() {
		if !slices.Contains(out, c.Code) {
			out = append(out, c.Code)
		}
	}
	return out
}

// parseTime reads the time of a datetime-local input (UTC), with or
// without seconds, or RFC 3339.
func parseTime(s string) (t time.Time, err error) {
	for _, layout := range []string{"2006-01-02T15:04", "2006-01-02T15:04:05", time.RFC3339} {
		if t, err = time.ParseInLocation(layout, s, time.UTC); err == nil {
			return t, nil
		}
	}
	return t, err
}

// values is the query as form values (for the continue link).
func (q searchQuery) values() url.Values {
	v := url.Values{}
	v.Set("what", q.What)
	for k, s := range map[string]string{"host": q.Host, "kind": string(q.Kind), "code": string(q.Code), "phase": string(q.Phase)} {
		if s != "" {
			v.Set(k, s)
		}
	}
	v.Set("from", q.From.UTC().Format("2006-01-02T15:04:05"))
	v.Set("until", q.Until.UTC().Format("2006-01-02T15:04:05"))
	v.Set("limit", strconv.Itoa(q.Limit))
	if q.Oldest {
		v.Set("order", orderOldest)
	}
	return v
}

// next is the URL of the page that continues a result.
func (q searchQuery) next(res *searchResult) string {
	v := q.values()
	if q.Oldest {
		v.Set("after", strconv.FormatUint(res.Next, 10))
	} else {
		v.Set("before", strconv.FormatUint(res.Next, 10))
	}
	return "/search?" + v.Encode()
}

// toggled is the URL of the same search in the other order, from the
// start.
func (q searchQuery) toggled() string {
	q.Oldest = !q.Oldest
	return "/search?" + q.values().Encode()
}

func (c *Console) search(ctx context.Context, q searchQuery) (*searchResult, error) {
	stream, filter := c.subj.OutcomesStream(), c.subj.Outcomes()
	if q.Host != "" {
		filter = c.subj.HostOutcomes(q.Host)
	}
	if q.What == searchIncidents {
		stream, filter = c.subj.IncidentsStream(), c.subj.Incidents()
		if q.Phase != "" {
			filter = c.subj.Incident(string(q.Phase))
		}
	}
	if !q.Oldest {
		return c.searchNewest(ctx, q, stream, filter)
	}
	req := batchRequest{NextFor: filter, Batch: scanChunk}
	if q.After > 0 {
		req.Seq = q.After + 1
	} else {
		from := q.From.UTC()
		req.StartTime = &from
	}
	res := &searchResult{}
	for res.Scanned < searchScan {
		msgs, err := c.batch(ctx, stream, req)
		if err != nil {
			return nil, err
		}
		if len(msgs) == 0 {
			return res, nil
		}
		for _, m := range msgs {
			if !m.Time.Before(q.Until) || c.take(q, m, res) {
				return res, nil
			}
		}
		req = batchRequest{NextFor: filter, Batch: scanChunk, Seq: msgs[len(msgs)-1].Seq + 1}
	}
	return res, nil
}

// searchNewest scans backward: from the last message before the window's
// end (or before q.Before), a chunk of sequences at a time, each chunk
// read forward on the filter and taken newest first, until the window's
// start, the page's limit or the scan's bound.
func (c *Console) searchNewest(ctx context.Context, q searchQuery, stream, filter string) (*searchResult, error) {
	res := &searchResult{}
	first, end, err := c.seqs(ctx, stream)
	if err != nil || end == 0 {
		return res, err
	}
	if q.Before > 0 {
		end = min(end, q.Before-1)
	} else {
		until := q.Until.UTC()
		at, err := c.batch(ctx, stream, batchRequest{StartTime: &until, Batch: 1})
		if err != nil {
			return nil, err
		}
		if len(at) > 0 {
			end = min(end, at[0].Seq-1) // the first message at or after the end
		}
	}
	for spanned := uint64(0); end >= first && end > 0; {
		if spanned >= searchSpan {
			res.Next = end + 1 // the page continues before it
			return res, nil
		}
		start := max(first, end-min(end-1, scanChunk-1))
		spanned += end - start + 1
		msgs, err := c.batch(ctx, stream, batchRequest{Seq: start, NextFor: filter, Batch: scanChunk})
		if err != nil {
			return nil, err
		}
		for i := len(msgs) - 1; i >= 0; i-- {
			m := msgs[i]
			if m.Seq > end {
				continue
			}
			if m.Time.Before(q.From) || c.take(q, m, res) {
				return res, nil
			}
		}
		if start <= first {
			break
		}
		end = start - 1
	}
	return res, nil
}

// take reads one message of a scan into res, and reports whether the
// page is full (its limit of matches, or the scan's bound): then res.Next
// continues from that message.
func (c *Console) take(q searchQuery, m storedMsg, res *searchResult) (full bool) {
	res.Scanned++
	if f, ok := c.match(q, m); ok {
		res.Matches = append(res.Matches, f)
	}
	if len(res.Matches) >= q.Limit || res.Scanned >= searchScan {
		res.Next = m.Seq
		return true
	}
	return false
}

// match reports whether a message matches the query's kind, code and
// phase.
func (c *Console) match(q searchQuery, m storedMsg) (found, bool) {
	f := found{Seq: m.Seq, Time: m.Time}
	if q.What == searchIncidents {
		var e schema.IncidentEvent
		if schema.Decode(m.Data, &e) != nil || (q.Code != "" && e.Code != q.Code) {
			return f, false
		}
		f.Event = &e
		return f, true
	}
	var o schema.Outcome
	if schema.Decode(m.Data, &o) != nil || (q.Kind != "" && o.Kind != q.Kind) {
		return f, false
	}
	if q.Code != "" && !slices.ContainsFunc(o.Incidents, func(i schema.Incident) bool { return i.Code == q.Code }) {
		return f, false
	}
	if q.Phase != "" && !slices.ContainsFunc(o.Incidents, func(i schema.Incident) bool { return i.Phase == q.Phase }) {
		return f, false
	}
	f.Host, f.ProposalID, _ = c.subj.ParseOutcome(m.Subject)
	o.Host = f.Host
	f.Outcome = &o
	return f, true
}
