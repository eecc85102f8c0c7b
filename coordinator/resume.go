package coordinator

// Streams that outlive their coordinator (docs/api.md "Resuming a stream",
// docs/cluster.md "Resumable streams"). The coordinator relaying a streamed
// job (its owner) appends everything the client gets, and the token ids
// behind it, to the job's journal: the subject macpool.sse.<request id> of
// the JetStream stream macpool_sse, replicated like the queues, so that it
// survives the owner. A record reaches the journal before its event reaches
// the client (stream.Recv), so whatever a client has, every coordinator can
// replay. Records are numbered from 0 (the head: the job, the stream's
// secret, the request's hash); a batch of records is one message whose
// Nats-Msg-Id is "<request id>.<first index>", which makes JetStream refuse
// a second writer of the same records (a takeover race).
//
// A client that sends the request again with Last-Event-ID gets a follower
// (Resume) on whichever coordinator it reached: it replays the journal from
// the head and then follows it while the owner is alive (asking it on
// macpool.sselive.<request id>, which also extends its grace). When nobody
// relays the stream any more (its owner died; the worker stopped the job
// when its pings found nobody), the follower takes it over: the job is
// queued again with the tokens of the journal (a failover resume, exact as
// the worker failovers are) and the follower becomes the owner.
//
// A client that goes away mid-stream detaches it (Detach): the job goes on,
// journaled, for Config.ResumeGrace after the client left or a follower
// last asked; then it is cancelled and the journal ends with a cancelled
// record (a resume then gets 404).

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/cluster"
	"github.com/macpool/macpool/job"
)

const (
	// journalWait is how long an event waits for the journal before it
	// goes to the client anyway: a journal whose JetStream leader died is
	// leaderless for seconds, and the streams of the survivors must not
	// stall meanwhile (they are resumable again once it caught up).
	journalWait = 100 * time.Millisecond
	// journalBatch bounds the records of one journal message.
	journalBatch = 256
	// journalGiveUp is how long a writer retries one batch.
	journalGiveUp = 30 * time.Second
	// journalMaxAge and journalMaxBytes bound the journal stream: a
	// stream older than an hour cannot be resumed, and the oldest
	// journals go first when the bytes run out.
	journalMaxAge   = time.Hour
	journalMaxBytes = 1 << 30
	// followPoll is how often a follower that caught up with the journal
	// looks for new records; followPing how often it asks the owner.
	followPoll = 20 * time.Millisecond
	followPing = time.Second
	// followReadFor bounds the retries of a journal read that failed
	// (no JetStream leader or replica reachable).
	followReadFor = 15 * time.Second
	// directGetTimeout bounds one journal read attempt.
	directGetTimeout = 500 * time.Millisecond
)

// journalRecord is one entry of a stream's journal.
type journalRecord struct {
	K    int          `json:"k"`
	At   int64        `json:"at"` // unix milliseconds
	Head *journalHead `json:"head,omitempty"`
	// Event is what the client got (nil: tokens without text, e.g. held
	// back by a stop string); Tokens are the token ids of choice Choice
	// behind it (a failover's resume).
	Event  *job.Event `json:"ev,omitempty"`
	Choice int        `json:"c,omitempty"`
	Tokens []int      `json:"t,omitempty"`
	// Attempt is the job id of the attempt that produced the record (its
	// cancel subject).
	Attempt string `json:"a,omitempty"`
	// NoResume: an event without token ids came (the job cannot resume).
	NoResume bool `json:"nr,omitempty"`
	// End follows the last event; Cancelled ends a stream that was
	// cancelled unfinished (nobody resumed it within the grace).
	End       bool `json:"end,omitempty"`
	Cancelled bool `json:"cancelled,omitempty"`
}

// journalHead is record 0.
type journalHead struct {
	Job    *job.Job `json:"job"`
	Secret string   `json:"secret"`
	Hash   string   `json:"hash"` // requestHash of the job
	Owner  string   `json:"owner"`
}

// journal is the writer side of one stream's journal; its fields are
// guarded by the stream's mu.
type journal struct {
	token   job.StreamToken
	subject string
	recs    []pendingRecord // not yet written: indexes written, written+1, ...
	next    int             // index of the next record
	written int             // records 0..written-1 are in the journal
	end     int             // index of the End/Cancelled record, once ended
	ended   bool
	broken  bool          // the writer gave up: events go out unjournaled
	notify  chan struct{} // a record was added
	// keepUntil: a detached stream is cancelled after it (Detach; a
	// follower's ask pushes it).
	keepUntil time.Time
}

type pendingRecord struct {
	rec journalRecord
	at  time.Time
}

func newJournal(tok job.StreamToken) *journal {
	return &journal{token: tok, subject: cluster.SubjectSSEPrefix + tok.RequestID, notify: make(chan struct{}, 1)}
}

// add appends a record and returns its index (-1 when the journal is
// broken or ended).
func (j *journal) add(r journalRecord) int {
	if j.broken || j.ended {
		return -1
	}
	now := time.Now()
	r.K, r.At = j.next, now.UnixMilli()
	j.next++
	j.recs = append(j.recs, pendingRecord{rec: r, at: now})
	select {
	case j.notify <- struct{}{}:
	default:
	}
	return r.K
}

// holdFor is how much longer the event of record k must wait for the
// journal (0: deliver it now). Nil-safe: no journal, no wait.
func (j *journal) holdFor(k int, now time.Time) time.Duration {
	if j == nil || k < 0 || k < j.written || j.broken || len(j.recs) == 0 {
		return 0
	}
	return max(0, journalWait-now.Sub(j.recs[0].at))
}

// holdEnd is holdFor of the end record (io.EOF waits for it too, so that a
// resumed finished stream ends instead of being taken over).
func (j *journal) holdEnd(now time.Time) time.Duration {
	if j == nil || !j.ended {
		return 0
	}
	return j.holdFor(j.end, now)
}

// push queues an event for Recv (ev may be nil) and journals it with the
// tokens behind it. s.mu is held.
func (s *stream) push(ev *job.Event, choice int, tokens []int) {
	k := -1
	if s.jr != nil && (ev != nil || len(tokens) > 0) {
		k = s.jr.add(journalRecord{Event: ev, Choice: choice, Tokens: tokens, Attempt: s.id, NoResume: !s.resumable})
	}
	if ev != nil {
		s.events = append(s.events, ev)
		s.evK = append(s.evK, k)
	}
}

// journalEnd appends the last record: End, or Cancelled for a stream that
// ended unfinished. s.mu is held.
func (s *stream) journalEnd(cancelled bool) {
	if s.jr == nil || s.jr.ended {
		return
	}
	s.jr.end = s.jr.add(journalRecord{End: !cancelled, Cancelled: cancelled, Attempt: s.id})
	s.jr.ended = true
}

// ResumeToken implements job.Resumable ("" for a stream without journal:
// its frames carry no ids).
func (s *stream) ResumeToken() string {
	if s.jr == nil {
		return ""
	}
	return s.jr.token.String()
}

// Detach implements job.Resumable: the job goes on for Config.ResumeGrace
// (extended by every follower's ask), its events journaled, then it is
// cancelled unless it finished.
func (s *stream) Detach() {
	c := s.c
	s.mu.Lock()
	ok := s.jr != nil && !s.jr.broken && !s.done
	if ok {
		s.jr.keepUntil = time.Now().Add(c.cfg.ResumeGrace)
	}
	s.mu.Unlock()
	if !ok || !c.track(&c.journals) {
		s.Close()
		return
	}
	go func() {
		defer c.journals.Done()
		c.keepDetached(s)
	}()
}

// track adds one to wg unless the coordinator is shutting down.
func (c *Coordinator) track(wg *sync.WaitGroup) bool {
	c.requeueMu.Lock()
	defer c.requeueMu.Unlock()
	if c.closing {
		return false
	}
	wg.Add(1)
	return true
}

// keepDetached receives a detached stream's events (journaling them) until
// it ends or its grace runs out, then closes it (cancelling an unfinished
// job).
func (c *Coordinator) keepDetached(s *stream) {
	log := c.log.With("request_id", s.job.ID)
	log.Info("client went away mid-stream; the job goes on for a resume", "grace", c.cfg.ResumeGrace)
	defer s.Close()
	for {
		s.mu.Lock()
		until := s.jr.keepUntil
		s.mu.Unlock()
		if !time.Now().Before(until) {
			log.Info("nobody resumed the stream within the grace; cancelling its job")
			return
		}
		ctx, cancel := context.WithDeadline(c.stopCtx, until)
		_, err := s.Recv(ctx)
		cancel()
		if errors.Is(err, io.EOF) || c.stopCtx.Err() != nil {
			return
		}
	}
}

// errJournalTaken: another coordinator wrote these records first.
var errJournalTaken = errors.New("journal written by another coordinator")

// startJournal gives a streamed job its journal (none when resumable
// streams are off or the journal stream is unavailable: the stream works
// as before, without ids).
func (c *Coordinator) startJournal(ctx context.Context, s *stream) {
	j := s.job
	if c.cfg.ResumeGrace <= 0 || j.Stream == nil || j.Kind == job.KindEmbedding {
		return
	}
	tok := job.StreamToken{RequestID: j.ID, Created: j.Stream.Created, Secret: job.NewSecret()}
	if _, _, err := job.ParseEventID(job.EventID(tok.String(), 0)); err != nil {
		return // a request id that cannot be a subject token (tests' own ids)
	}
	if _, err := c.journalStream(ctx); err != nil {
		level := slog.LevelDebug
		if c.sse.warned.CompareAndSwap(false, true) {
			level = slog.LevelWarn // once: it would be every streamed request
		}
		c.log.Log(ctx, level, "stream not resumable: no journal", "request_id", j.ID, "err", err)
		return
	}
	s.jr = newJournal(tok)
	s.jr.add(journalRecord{Head: &journalHead{Job: j, Secret: tok.Secret, Hash: requestHash(j), Owner: c.cfg.Name}})
	if !c.track(&c.journals) {
		s.jr = nil
		return
	}
	go c.journalLoop(s)
}

// requestHash identifies a request apart from its id, key and stream
// metadata: a resume must re-send the request it resumes.
func requestHash(j *job.Job) string {
	cp := *j
	cp.ID, cp.APIKey, cp.Stream = "", "", nil
	b, _ := json.Marshal(&cp)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// sseJournal caches the journal stream (created on first use, its
// replicas grown as coordinators join, never shrunk).
type sseJournal struct {
	warned   atomic.Bool // the journal was unavailable (logged once)
	mu       sync.Mutex
	st       jetstream.Stream
	replicas int
}

func (c *Coordinator) journalStream(ctx context.Context) (jetstream.Stream, error) {
	c.sse.mu.Lock()
	defer c.sse.mu.Unlock()
	r := c.replicas()
	if c.sse.st != nil && c.sse.replicas >= r {
		return c.sse.st, nil
	}
	want := jetstream.StreamConfig{
		Name:        cluster.SSEStreamName,
		Description: "macpool SSE journals: resumable streams (Last-Event-ID)",
		Subjects:    []string{cluster.SubjectSSEPrefix + "*"},
		Storage:     jetstream.FileStorage,
		MaxAge:      journalMaxAge,
		MaxBytes:    journalMaxBytes,
		Discard:     jetstream.DiscardOld,
		Duplicates:  2 * time.Minute,
		AllowDirect: true, // reads from any replica, also while leaderless
		Replicas:    r,
	}
	st, err := c.js.Stream(ctx, cluster.SSEStreamName)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		st, err = c.js.CreateStream(ctx, want)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			st, err = c.js.Stream(ctx, cluster.SSEStreamName)
		}
	case err == nil && st.CachedInfo().Config.Replicas < r:
		want.Replicas = max(r, st.CachedInfo().Config.Replicas)
		st, err = c.js.UpdateStream(ctx, want)
	}
	if err != nil {
		return nil, fmt.Errorf("journal stream: %w", err)
	}
	c.sse.st, c.sse.replicas = st, max(r, st.CachedInfo().Config.Replicas)
	return st, nil
}

// journalLoop writes s's journal in order, one batch at a time, and
// answers followers' asks while it runs. It ends after the last record or
// when it gives up (the stream then goes on unjournaled).
func (c *Coordinator) journalLoop(s *stream) {
	defer c.journals.Done()
	jr := s.jr
	sub, err := c.nc.Subscribe(cluster.SubjectSSELivePrefix+jr.token.RequestID, func(m *nats.Msg) {
		s.mu.Lock()
		jr.keepUntil = time.Now().Add(c.cfg.ResumeGrace)
		s.mu.Unlock()
		m.Respond([]byte("ok"))
	})
	if err == nil {
		defer sub.Unsubscribe()
	}
	for {
		s.mu.Lock()
		n := min(len(jr.recs), journalBatch)
		if n > 1 && jr.recs[0].rec.Head != nil {
			n = 1 // the head alone: it holds the whole request
		}
		batch := make([]journalRecord, n)
		for i := range n {
			batch[i] = jr.recs[i].rec
		}
		first, finished := jr.written, jr.ended && n == 0
		s.mu.Unlock()
		if finished {
			return
		}
		if n == 0 {
			select {
			case <-jr.notify:
			case <-c.stopCtx.Done():
				return
			}
			continue
		}
		if err := c.appendJournal(jr.subject, fmt.Sprintf("%s.%d", jr.token.RequestID, first), batch); err != nil {
			s.mu.Lock()
			jr.broken = true
			id := s.id
			s.mu.Unlock()
			s.wake()
			if errors.Is(err, errJournalTaken) {
				// A follower took the stream over (it found nobody
				// relaying it): this copy stops.
				c.log.Warn("stream taken over by another coordinator; stopping this copy", "request_id", s.job.ID)
				s.fail(unavailable("the stream continues on another coordinator"))
				c.nc.Publish(cluster.CancelSubject(id), nil)
			} else if c.stopCtx.Err() == nil {
				c.log.Warn("journal write failed; the stream is not resumable any more", "request_id", s.job.ID, "err", err)
			}
			return
		}
		s.mu.Lock()
		clear(jr.recs[:n])
		jr.recs = jr.recs[n:]
		jr.written += n
		s.mu.Unlock()
		s.wake()
	}
}

// appendJournal stores one batch, retrying while JetStream has no leader.
// A first attempt answered as a duplicate means another writer stored
// these indexes (errJournalTaken); a retry's duplicate is our own.
func (c *Coordinator) appendJournal(subject, msgID string, batch []journalRecord) error {
	data, err := json.Marshal(batch)
	if err != nil {
		return fmt.Errorf("encode journal: %w", err)
	}
	msg := nats.NewMsg(subject)
	msg.Header.Set(jetstream.MsgIDHeader, msgID)
	msg.Data = data
	start := time.Now()
	for attempt := 0; ; attempt++ {
		actx, cancel := context.WithTimeout(c.stopCtx, time.Second)
		ack, err := c.js.PublishMsg(actx, msg)
		cancel()
		if err == nil {
			if ack.Duplicate && attempt == 0 {
				return errJournalTaken
			}
			return nil
		}
		if c.stopCtx.Err() != nil || time.Since(start) > journalGiveUp {
			return fmt.Errorf("append journal: %w", err)
		}
		select {
		case <-c.stopCtx.Done():
			return c.stopCtx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func streamNotFound(format string, args ...any) *openai.Error {
	return &openai.Error{Status: http.StatusNotFound, Type: openai.TypeInvalidRequest, Param: "Last-Event-ID", Code: "stream_not_found",
		Message: fmt.Sprintf(format, args...) + "; send the request without Last-Event-ID to start again"}
}

// Resume implements api.Resumer.
func (c *Coordinator) Resume(ctx context.Context, lastEventID string, j *job.Job) (job.Stream, error) {
	const unknown = "no stream with this Last-Event-ID (unknown, or created with another API key)"
	tok, _, err := job.ParseEventID(lastEventID)
	if err != nil || c.cfg.ResumeGrace <= 0 || tok.RequestID != j.ID {
		return nil, streamNotFound(unknown)
	}
	subject := cluster.SubjectSSEPrefix + tok.RequestID
	// No responders: no journal stream (nothing was ever streamed) or no
	// replica reachable; with replicas a survivor answers at once.
	m, err := c.readJournal(ctx, 1, subject, 2*time.Second)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, streamNotFound(unknown)
	}
	if err != nil {
		return nil, unavailable("read the stream journal: %v", err)
	}
	head := m.recs
	if head[0].K != 0 || head[0].Head == nil || head[0].Head.Job == nil {
		return nil, streamNotFound(unknown)
	}
	h := head[0].Head
	if subtle.ConstantTimeCompare([]byte(h.Secret), []byte(tok.Secret)) != 1 || h.Job.APIKey != j.APIKey {
		return nil, streamNotFound(unknown)
	}
	if h.Hash != requestHash(j) {
		return nil, openai.InvalidRequest("Last-Event-ID", "the Last-Event-ID belongs to a different request: re-send the request of the stream unchanged")
	}
	f := &follower{c: c, token: tok, subject: subject, head: h, seq: m.seq, log: c.log.With("request_id", j.ID)}
	if last, err := c.getLastJournal(ctx, subject); err == nil {
		switch {
		case last.Cancelled:
			return nil, streamNotFound("the stream was cancelled: nobody resumed it within %v", c.cfg.ResumeGrace)
		case !last.End && time.Since(time.UnixMilli(last.At)) > c.cfg.ResumeGrace && !f.alive(ctx):
			return nil, streamNotFound("the stream expired: nobody resumed it within %v", c.cfg.ResumeGrace)
		}
	}
	return f, nil
}

// Journal reads are JetStream direct gets sent as plain requests: any
// replica of the journal answers them, without the stream's or the meta
// group's leader, which the coordinator that just died may have been (the
// jetstream client's GetMsg first needs the stream's info from the meta
// leader). A missing message is jetstream.ErrMsgNotFound; no responders
// (the journal stream does not exist, or no replica is reachable yet) is
// retried briefly by the callers.
const directGet = "$JS.API.DIRECT.GET." + cluster.SSEStreamName

type journalMsg struct {
	seq  uint64
	recs []journalRecord
}

// getJournal reads the first journal message of subject at or after seq.
func (c *Coordinator) getJournal(ctx context.Context, seq uint64, subject string) (journalMsg, error) {
	req, _ := json.Marshal(struct {
		Seq     uint64 `json:"seq"`
		NextFor string `json:"next_by_subj"`
	}{seq, subject})
	return c.directGet(ctx, directGet, req)
}

// getLastJournal reads the last record of subject.
func (c *Coordinator) getLastJournal(ctx context.Context, subject string) (journalRecord, error) {
	m, err := c.directGet(ctx, directGet+"."+subject, nil)
	if err != nil {
		return journalRecord{}, err
	}
	return m.recs[len(m.recs)-1], nil
}

func (c *Coordinator) directGet(ctx context.Context, subject string, req []byte) (journalMsg, error) {
	// A replica answers in milliseconds; a request that went to the queue
	// subscription of a server that just died is lost, so the callers'
	// retries need several attempts inside their patience.
	rctx, cancel := context.WithTimeout(ctx, directGetTimeout)
	defer cancel()
	m, err := c.nc.RequestWithContext(rctx, subject, req)
	if err != nil {
		return journalMsg{}, err
	}
	if len(m.Data) == 0 {
		if st := m.Header.Get("Status"); st == "404" {
			return journalMsg{}, jetstream.ErrMsgNotFound
		} else if st != "" {
			return journalMsg{}, fmt.Errorf("journal read: status %s %s", st, m.Header.Get("Description"))
		}
	}
	seq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
	if err != nil {
		return journalMsg{}, fmt.Errorf("journal read: sequence header %q", m.Header.Get(jetstream.SequenceHeader))
	}
	var recs []journalRecord
	if err := json.Unmarshal(m.Data, &recs); err != nil || len(recs) == 0 {
		return journalMsg{}, fmt.Errorf("malformed journal message %d", seq)
	}
	return journalMsg{seq: seq, recs: recs}, nil
}

// readJournal is getJournal retried for up to patience while the journal
// is unreachable (a replica taking over); a missing stream after that
// reads as not found.
func (c *Coordinator) readJournal(ctx context.Context, seq uint64, subject string, patience time.Duration) (journalMsg, error) {
	start := time.Now()
	for {
		m, err := c.getJournal(ctx, seq, subject)
		if err == nil || errors.Is(err, jetstream.ErrMsgNotFound) || ctx.Err() != nil {
			return m, err
		}
		if time.Since(start) > patience {
			if errors.Is(err, nats.ErrNoResponders) {
				return m, jetstream.ErrMsgNotFound
			}
			return m, err
		}
		select {
		case <-ctx.Done():
			return m, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// follower is a resumed stream: the journal replayed from its head, then
// followed while its owner relays it, then taken over (owned).
type follower struct {
	c       *Coordinator
	token   job.StreamToken
	subject string
	head    *journalHead
	log     *slog.Logger

	seq  uint64 // next journal message to read
	k    int    // next record index
	buf  []journalRecord
	last time.Time // time of the last record

	// What a takeover needs, rebuilt from the records.
	tokens   [][]int
	roleSent map[int]bool
	finished map[int]bool
	noResume bool
	over     bool // usage or an error event came: nothing left to generate
	attempt  string

	pinged time.Time
	misses int
	dead   bool
	ended  bool
	owned  *stream
}

// ResumeToken implements job.Resumable.
func (f *follower) ResumeToken() string { return f.token.String() }

// Recv implements job.Stream.
func (f *follower) Recv(ctx context.Context) (*job.Event, error) {
	for {
		if len(f.buf) > 0 {
			r := f.buf[0]
			f.buf = f.buf[1:]
			switch ev := f.apply(r); {
			case ev != nil:
				return ev, nil
			case r.End:
				f.ended = true
			case r.Cancelled:
				f.ended = true
				return &job.Event{Err: unavailable("the stream's job was cancelled")}, nil
			}
			continue
		}
		if f.ended {
			return nil, io.EOF
		}
		if f.owned != nil {
			return f.owned.Recv(ctx)
		}
		got, err := f.read(ctx)
		if err != nil {
			return nil, err
		}
		if time.Since(f.pinged) >= followPing {
			// Also while records flow: the ask extends the owner's grace.
			f.dead = !f.alive(ctx)
		}
		if got {
			continue
		}
		if f.dead {
			// Nobody relays the stream: read once more (the owner may
			// have ended it just now), then take it over.
			if got, err = f.read(ctx); err != nil || got {
				if err != nil {
					return nil, err
				}
				continue
			}
			if err := f.takeover(); err != nil {
				return nil, err
			}
			continue
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(followPoll):
		}
	}
}

// read fetches the next journal message into buf (got false: none yet).
func (f *follower) read(ctx context.Context) (got bool, err error) {
	m, err := f.c.readJournal(ctx, f.seq, f.subject, followReadFor)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, nil
	}
	if err != nil {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		return false, unavailable("read the stream journal: %v", err)
	}
	f.seq = m.seq + 1
	for _, r := range m.recs {
		switch {
		case r.K < f.k: // written twice (a takeover race): the first copy counts
		case r.K > f.k:
			return false, unavailable("the stream's journal lost records %d to %d", f.k, r.K-1)
		default:
			f.buf = append(f.buf, r)
			f.k++
		}
	}
	return true, nil
}

// alive asks whether a coordinator relays the stream (extending its
// grace). No responders is definite; two unanswered asks in a row count as
// nobody.
func (f *follower) alive(ctx context.Context) bool {
	f.pinged = time.Now()
	actx, cancel := context.WithTimeout(ctx, followPing)
	defer cancel()
	m, err := f.c.nc.RequestWithContext(actx, cluster.SubjectSSELivePrefix+f.token.RequestID, nil)
	switch {
	case err == nil && string(m.Data) == "ok":
		f.misses = 0
		return true
	case errors.Is(err, nats.ErrNoResponders):
		return false
	case ctx.Err() != nil:
		return true // our client left; nothing to decide
	}
	f.misses++
	return f.misses < 2
}

// apply rebuilds the takeover state from a record and returns the event
// for the client, if it has one.
func (f *follower) apply(r journalRecord) *job.Event {
	f.last = time.UnixMilli(r.At)
	if r.Attempt != "" {
		f.attempt = r.Attempt
	}
	f.noResume = f.noResume || r.NoResume
	if f.roleSent == nil {
		f.roleSent, f.finished = map[int]bool{}, map[int]bool{}
	}
	if r.Choice >= 0 && r.Choice < 1024 && (len(r.Tokens) > 0 || r.Event != nil) {
		for len(f.tokens) <= r.Choice {
			f.tokens = append(f.tokens, nil)
		}
		f.tokens[r.Choice] = append(f.tokens[r.Choice], r.Tokens...)
	}
	ev := r.Event
	if ev == nil {
		return nil
	}
	if ev.Role != "" {
		f.roleSent[ev.Choice] = true
	}
	if ev.FinishReason != "" {
		f.finished[ev.Choice] = true
	}
	if ev.Usage != nil || ev.Err != nil {
		f.over = true
	}
	return ev
}

// takeover continues the stream on this coordinator: the job is queued
// again with the journal's tokens, the old attempt (if its worker still
// runs it) is cancelled, and new records go to the same journal.
func (f *follower) takeover() error {
	c := f.c
	if f.over {
		f.ended = true // everything was generated; only the end record is missing
		return nil
	}
	if f.noResume {
		return unavailable("the coordinator relaying this stream failed, and its job cannot resume on another worker")
	}
	if time.Since(f.last) > c.cfg.ResumeGrace {
		return streamNotFound("the stream expired: nobody resumed it within %v", c.cfg.ResumeGrace)
	}
	j := f.head.Job
	s := &stream{c: c, id: nuid.Next(), model: j.Model, job: j, resumable: true, notify: make(chan struct{}, 1), submitted: time.Now(),
		attempts: 1, roleSent: f.roleSent, finished: f.finished}
	resume := make([][]int, max(1, len(f.tokens)))
	for i, t := range f.tokens {
		s.tokens = append(s.tokens, append([]int{}, t...))
		resume[i] = append([]int{}, t...)
	}
	s.jr = newJournal(f.token)
	s.jr.next, s.jr.written = f.k, f.k
	if !c.track(&c.journals) {
		return unavailable("coordinator %s is shutting down", c.cfg.Name)
	}
	go c.journalLoop(s)
	c.streams.Store(s.id, s)
	f.owned = s
	if f.attempt != "" {
		c.nc.Publish(cluster.CancelSubject(f.attempt), nil) // a worker still on it stops
	}
	f.log.Info("taking over a stream nobody relays", "owner", f.head.Owner, "job", s.id, "records", f.k, "tokens", len(resume[0]))
	c.cfg.Metrics.Failover("coordinator") // nil-safe

	body, err := json.Marshal(cluster.Job{Job: *j, Resume: resume})
	if err != nil {
		s.fail(openai.ServerError("encode job: %v", err))
		return nil
	}
	msg := nats.NewMsg(cluster.JobsSubject(j.Model, j.APIKey))
	msg.Header.Set(cluster.HeaderReply, cluster.ReplySubject(c.cfg.Name, s.id))
	msg.Header.Set(cluster.HeaderJob, s.id)
	msg.Header.Set(jetstream.MsgIDHeader, s.id)
	msg.Data = body
	if !c.track(&c.requeues) {
		s.fail(unavailable("coordinator %s is shutting down", c.cfg.Name))
		return nil
	}
	id := s.id
	go func() {
		defer c.requeues.Done()
		if err := c.ensureStream(c.stopCtx, j.Model); err != nil {
			s.fail(unavailable("queue for model %q is unavailable: %v", j.Model, err))
			return
		}
		if c.offerFailover(c.stopCtx, s, msg, "", false) {
			return
		}
		ack, err := c.publish(c.stopCtx, msg)
		if err != nil {
			s.fail(c.publishError(j, err))
			return
		}
		s.mu.Lock()
		if s.id == id && s.worker == "" {
			s.queueSeq = ack.Sequence
		}
		s.mu.Unlock()
	}()
	return nil
}

// Detach implements job.Resumable: a stream this coordinator took over is
// detached; one it only follows goes on at its owner for the grace after
// this follower's last ask.
func (f *follower) Detach() {
	if f.owned != nil {
		f.owned.Detach()
	}
}

// Close implements job.Stream.
func (f *follower) Close() error {
	if f.owned != nil {
		return f.owned.Close()
	}
	return nil
}
