package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/cluster"
	"github.com/macpool/macpool/job"
)

func unavailable(format string, args ...any) *openai.Error {
	return openai.Unavailable(format, args...)
}
func unauthorized(format string, args ...any) *openai.Error {
	return openai.Unauthorized(format, args...)
}

// Models implements api.Service: registered models and models served by live
// workers.
func (c *Coordinator) Models(ctx context.Context) ([]openai.Model, error) {
	st := c.fsm.snapshot()
	seen := map[string]openai.Model{}
	for name, m := range st.Models {
		seen[name] = openai.Model{ID: name, Object: "model", Created: m.Created, OwnedBy: "macpool"}
	}
	for _, m := range c.ml.Members() {
		if m.Meta.Role != cluster.RoleWorker {
			continue
		}
		for _, name := range m.Meta.Models {
			if _, ok := seen[name]; !ok {
				seen[name] = openai.Model{ID: name, Object: "model", OwnedBy: "macpool"}
			}
		}
	}
	out := make([]openai.Model, 0, len(seen))
	for _, m := range seen {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// Ready implements api.Service: NATS is connected and a Raft leader is known.
func (c *Coordinator) Ready(ctx context.Context) error {
	if c.stopCtx.Err() != nil {
		return unavailable("coordinator is shutting down")
	}
	if !c.nc.IsConnected() {
		return unavailable("coordinator %s is not connected to NATS", c.cfg.Name)
	}
	if c.Leader() == "" {
		return unavailable("no raft leader")
	}
	return nil
}

// workersFor returns the live workers that serve model.
func (c *Coordinator) workersFor(model string) []cluster.Member {
	var out []cluster.Member
	for _, m := range c.ml.Members() {
		if m.Meta.Role == cluster.RoleWorker && m.Meta.Serves(model) && !m.Meta.Leaving { // drain: not a leaving one
			out = append(out, m)
		}
	}
	return out
}

// maxReplicas is the replica count of the queues on clustered JetStream:
// three copies survive the loss of any one coordinator.
const maxReplicas = 3

// replicas is how many copies the queues should have: 1 on a standalone or
// external server, else min(3, coordinators running clustered JetStream that
// gossip shows alive). It only matters when it grows: queues are never
// scaled down because a coordinator failed.
func (c *Coordinator) replicas() int {
	if c.meta.Routes == "" {
		return 1
	}
	n := 1 // this coordinator
	for _, m := range c.ml.Members() {
		if m.Name != c.cfg.Name && m.Meta.Role == cluster.RoleCoordinator && m.Meta.Routes != "" && !m.Meta.Leaving {
			n++
		}
	}
	return min(n, maxReplicas)
}

// ensureStream creates the model's work-queue stream and shared pull
// consumer if needed, and scales the stream (the consumer follows) up to
// replicas() copies as coordinators join. Cached per model with the replica
// count reached; serialised, and an existing stream is only updated when
// its limits or replicas differ, so that coordinators do not keep
// rewriting it.
func (c *Coordinator) ensureStream(ctx context.Context, model string) error {
	r := c.replicas()
	if have, ok := c.ensured.Load(model); ok && have.(int) >= r {
		return nil
	}
	c.ensureMu.Lock()
	defer c.ensureMu.Unlock()
	if have, ok := c.ensured.Load(model); ok && have.(int) >= r {
		return nil
	}
	name := cluster.StreamName(model)
	want := jetstream.StreamConfig{
		Name:                 name,
		Description:          "macpool jobs for " + model,
		Subjects:             []string{cluster.JobsFilter(model)},
		Retention:            jetstream.WorkQueuePolicy,
		Storage:              jetstream.FileStorage,
		MaxMsgs:              int64(c.cfg.QueueLimit),
		MaxMsgsPerSubject:    int64(c.cfg.KeyQueueLimit),
		Discard:              jetstream.DiscardNew,
		DiscardNewPerSubject: true,
		Duplicates:           time.Minute,
		Replicas:             r,
	}
	st, err := c.js.Stream(ctx, name)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		_, err = c.js.CreateStream(ctx, want)
	case err == nil:
		have := st.CachedInfo().Config
		want.Replicas = max(want.Replicas, have.Replicas)
		if have.MaxMsgs != want.MaxMsgs || have.MaxMsgsPerSubject != want.MaxMsgsPerSubject || have.Replicas != want.Replicas {
			c.log.Info("updating queue", "model", model, "queue_limit", want.MaxMsgs, "key_queue_limit", want.MaxMsgsPerSubject,
				"replicas", want.Replicas, "was", have.Replicas)
			_, err = c.js.UpdateStream(ctx, want)
		}
	}
	if err != nil {
		return fmt.Errorf("stream %s: %w", name, err)
	}
	_, err = c.js.Consumer(ctx, name, cluster.ConsumerName)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		_, err = c.js.CreateConsumer(ctx, name, jetstream.ConsumerConfig{
			Durable:       cluster.ConsumerName,
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       5 * time.Second, // workers ack on receipt: this only covers lost deliveries
			MaxWaiting:    4096,
			MaxAckPending: -1,
		})
	}
	if err != nil {
		return fmt.Errorf("consumer %s/%s: %w", name, cluster.ConsumerName, err)
	}
	c.ensured.Store(model, want.Replicas)
	return nil
}

// Submit implements api.Service: the job is published on the model's
// JetStream work queue and the returned stream relays the worker's frames.
func (c *Coordinator) Submit(ctx context.Context, job *job.Job) (job.Stream, error) {
	if c.stopCtx.Err() != nil {
		return nil, unavailable("coordinator %s is shutting down", c.cfg.Name)
	}
	release, err := c.admitStream(job.APIKey) // drain: Config.KeyMaxStreams
	if err != nil {
		return nil, err
	}
	admitted := false
	defer func() {
		if !admitted {
			release()
		}
	}()
	workers := c.workersFor(job.Model)
	if len(workers) == 0 && !c.pipelined(job.Model) { // pipelines.go: queued while its plan is re-placed
		c.fsm.mu.RLock()
		_, known := c.fsm.state.Models[job.Model]
		c.fsm.mu.RUnlock()
		if !known {
			return nil, openai.ModelNotFound(job.Model)
		}
		return nil, unavailable("no worker is serving model %q right now", job.Model)
	}
	// Only a missing queue is created here; scaling its replicas up is
	// watchMembers' job and never delays a request.
	if _, ok := c.ensured.Load(job.Model); !ok {
		if err := c.ensureStream(ctx, job.Model); err != nil {
			c.log.Warn("queue unavailable", "model", job.Model, "err", err)
			return nil, unavailable("queue for model %q is unavailable: %v", job.Model, err)
		}
	}
	body, err := json.Marshal(cluster.Job{Job: *job})
	if err != nil {
		return nil, openai.ServerError("encode job: %v", err)
	}
	if limit := c.jobLimit(); int64(len(body)) > limit {
		return nil, &openai.Error{Status: http.StatusRequestEntityTooLarge, Type: openai.TypeInvalidRequest, Code: "request_too_large",
			Message: fmt.Sprintf("the request is %d bytes as a job, more than the %d bytes the cluster's queue carries (NATS max_payload); send a shorter request", len(body), limit)}
	}
	id := nuid.Next()
	s := &stream{c: c, id: id, model: job.Model, job: job, resumable: true, notify: make(chan struct{}, 1), submitted: time.Now()}
	c.startJournal(ctx, s) // resume.go: a streamed job's events are kept in the cluster
	c.streams.Store(id, s)

	msg := nats.NewMsg(cluster.JobsSubject(job.Model, job.APIKey))
	msg.Header.Set(cluster.HeaderReply, cluster.ReplySubject(c.cfg.Name, id))
	msg.Header.Set(cluster.HeaderJob, id)
	msg.Header.Set(jetstream.MsgIDHeader, id)
	msg.Data = body
	ack, err := c.routeOrPublish(ctx, s, msg) // routing.go: to a worker holding its prefix, else queued
	if err != nil {
		c.streams.Delete(id)
		s.fail(nil) // ends the journal writer
		return nil, c.publishError(job, err)
	}
	s.mu.Lock()
	s.queueSeq = ack.Sequence
	s.mu.Unlock()
	s.release, admitted = release, true
	return s, nil
}

// MaxJobBytes is the largest message the embedded NATS server carries: a job
// is its request (up to the API's 16 MiB body limit) plus headroom for its
// envelope and, after a failover, its resume tokens.
const MaxJobBytes = 24 << 20

// jobLimit is the largest job the queue takes: the connection's max_payload
// (an external NATS server may have a smaller one) less room for headers and
// the resume tokens a failover adds.
func (c *Coordinator) jobLimit() int64 {
	mp := c.nc.MaxPayload()
	if mp <= 0 {
		mp = MaxJobBytes
	}
	return mp - min(mp/8, 1<<20)
}

// publishWait bounds how long Submit retries a publish that found no stream
// leader: clustered JetStream elects a new one 4–9 s after a coordinator
// holding it died (nats-server's fixed election timeouts).
const publishWait = 12 * time.Second

// publish stores msg in the queue, retrying while the stream has no leader
// (no answer, no responders, 503). Retries are safe: Nats-Msg-Id makes the
// server drop a copy it already stored.
func (c *Coordinator) publish(ctx context.Context, msg *nats.Msg) (*jetstream.PubAck, error) {
	deadline := time.Now().Add(publishWait)
	for attempt := 1; ; attempt++ {
		// Short attempts: a publish that reaches no leader just times out,
		// and a late ack of an attempt that did store it is deduplicated.
		actx, cancel := context.WithTimeout(ctx, time.Second)
		ack, err := c.js.PublishMsg(actx, msg)
		cancel()
		if err == nil || ctx.Err() != nil || time.Now().After(deadline) || !transient(err) {
			if err == nil && attempt > 1 {
				c.log.Info("queued after retries", "attempts", attempt)
			}
			return ack, err
		}
		c.log.Debug("publish retry", "attempt", attempt, "err", err)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// jsErrClusterNotAvail is nats-server's JSClusterNotAvailErr ("JetStream
// system temporarily unavailable"); nats.go has no constant for it.
const jsErrClusterNotAvail jetstream.ErrorCode = 10008

// transient reports whether a JetStream publish error may clear once the
// stream has a leader again.
func transient(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		// Only "JetStream system temporarily unavailable": other 503s are
		// refusals (e.g. the queue limits), and a retry of a refused
		// message would be acked as a duplicate of itself.
		return apiErr.ErrorCode == jsErrClusterNotAvail
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders)
}

func (c *Coordinator) publishError(job *job.Job, err error) *openai.Error {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "maximum messages per subject"):
		return openai.RateLimited(c.cfg.RetryAfter, "too many queued requests for this API key on model %q (limit %d)", job.Model, c.cfg.KeyQueueLimit)
	case strings.Contains(msg, "maximum messages"), strings.Contains(msg, "maximum bytes"):
		return openai.RateLimited(c.cfg.RetryAfter, "the queue for model %q is full (%d requests)", job.Model, c.cfg.QueueLimit)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return &openai.Error{Status: 499, Type: openai.TypeInvalidRequest, Message: "request cancelled while queueing"}
	}
	c.log.Warn("publish job", "model", job.Model, "err", err)
	return unavailable("could not queue the request: %v", err)
}

// onFrame handles every frame sent to this coordinator's reply subjects.
// It runs on one goroutine; it never blocks on a slow HTTP client because
// streams buffer their events.
func (c *Coordinator) onFrame(m *nats.Msg) {
	id := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
	f, err := cluster.ParseFrame(m.Data)
	v, ok := c.streams.Load(id)
	if !ok {
		if m.Reply != "" { // start, ping, or a retried last frame
			m.Respond([]byte("gone"))
		}
		return
	}
	s := v.(*stream)
	if err == nil && f.Kind == cluster.FramePing {
		s.mu.Lock()
		s.lastPing = time.Now()
		s.mu.Unlock()
		if m.Reply != "" {
			m.Respond([]byte("ok"))
		}
		return
	}
	if err != nil {
		s.fail(openai.ServerError("malformed frame from worker: %v", err))
		return
	}
	s.frame(f, m)
	if (f.Kind == cluster.FrameEnd || f.Kind == cluster.FrameError || f.Kind == cluster.FrameHandoff) && m.Reply != "" {
		m.Respond([]byte("ok")) // the worker stops retrying its last frame
	}
}

// workerSilence is how long a worker that left gossip may stay silent
// before its running jobs are failed.
const workerSilence = 2 * time.Second

// jobSilence is how long a running job may go without a frame or a ping
// from its worker (which pings every worker.Config.PingInterval, 1 s by
// default) before it moves to another worker even though gossip shows the
// worker alive.
const jobSilence = 5 * time.Second

// watchMembers fails the jobs of workers that vanished and prepares queues
// for newly served models.
func (c *Coordinator) watchMembers(ctx context.Context) {
	changes, unsub := c.ml.Subscribe()
	defer unsub()
	// Also on a timer: a queue that could not be created (NATS busy) is
	// retried, and nothing depends on having seen every change.
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		alive := map[string]string{} // live member -> its gossip address
		served := map[string]bool{}  // models some live, not leaving, worker serves
		for _, m := range c.ml.Members() {
			alive[m.Name] = m.Addr
			if m.Meta.Role == cluster.RoleWorker && !m.Meta.Leaving {
				for _, model := range m.Meta.Models {
					served[model] = true
				}
			}
			if m.Meta.Role == cluster.RoleWorker {
				for _, model := range m.Meta.Models {
					ectx, cancel := context.WithTimeout(ctx, 5*time.Second)
					if err := c.ensureStream(ectx, model); err != nil {
						c.log.Debug("prepare queue", "model", model, "err", err)
					}
					cancel()
				}
			}
		}
		c.streams.Range(func(_, v any) bool {
			s := v.(*stream)
			s.mu.Lock()
			w, last, addr, seen := s.worker, s.lastFrame, s.workerAddr, s.lastPing
			s.mu.Unlock()
			if last.After(seen) {
				seen = last
			}
			// The worker that started the job is gone when gossip lost it
			// or shows another process under its name (a restart: new
			// address). Gossip may declare a busy worker dead by mistake:
			// only a worker that is gone and silent fails its streams.
			a, ok := alive[w]
			gone := !ok || (addr != "" && a != addr)
			switch {
			case w == "":
				s.orphan(served[s.model] || c.pipelined(s.model)) // orphan.go; pipelines.go: a plan being re-placed serves
			case gone && time.Since(last) > workerSilence:
				c.failover(ctx, s, w, fmt.Sprintf("worker %s failed during generation", w), true)
			case time.Since(seen) > jobSilence:
				// Alive by gossip but neither frames nor pings for the
				// job: that process does not run it (e.g. restarted under
				// its name and address).
				c.failover(ctx, s, w, fmt.Sprintf("worker %s sent nothing about the job for %v", w, jobSilence), true)
			case c.cfg.StallTimeout > 0 && time.Since(last) > c.cfg.StallTimeout:
				c.failover(ctx, s, w, fmt.Sprintf("worker %s made no progress for %v", w, c.cfg.StallTimeout), true)
			}
			return true
		})
		select {
		case <-ctx.Done():
			return
		case <-changes:
		case <-t.C:
		}
	}
}

// stream is one submitted job as seen by the HTTP layer. Frames are
// buffered without bound (a generation is bounded by max_tokens) so the
// shared NATS subscription never waits for a slow client.
type stream struct {
	c     *Coordinator
	model string
	job   *job.Job // kept to requeue it after a worker failure

	mu        sync.Mutex
	id        string    // job id of the current attempt (reply and cancel subjects)
	queueSeq  uint64    // JetStream sequence while queued
	worker    string    // set by the start frame
	lastFrame time.Time // arrival of the last frame
	next      uint64    // next expected frame seq
	events    []*job.Event
	evK       []int    // journal record index of each of events (resume.go)
	jr        *journal // the SSE journal (resume.go); nil: not resumable
	done      bool
	notify    chan struct{}

	// Mid-stream failover state: the tokens whose text reached the
	// client, per choice; whether every text event carried its tokens (a
	// worker whose engine cannot resume makes the job non-resumable);
	// failovers so far; choices that already had their role / finish
	// event (not repeated by a resumed attempt).
	tokens    [][]int
	resumable bool
	release   func() // frees the key's stream count (keys_limit.go); called by Close
	attempts  int
	roleSent  map[int]bool
	finished  map[int]bool
	orphaned  time.Time // since when no worker serves the queued job's model (orphan.go)
	// The worker's gossip address when it started the job (tells a
	// restarted process under the same name apart) and its last ping.
	workerAddr string
	lastPing   time.Time

	submitted time.Time // Submit's time, for the queue wait metric

	closeOnce sync.Once
}

func (s *stream) wake() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

func (s *stream) frame(f cluster.Frame, m *nats.Msg) {
	s.mu.Lock()
	if s.done {
		s.mu.Unlock()
		if f.Kind == cluster.FrameStart && m.Reply != "" {
			m.Respond([]byte("gone"))
		}
		return
	}
	if f.Kind == cluster.FrameStart && s.worker != "" {
		// A redelivered copy of a job that already runs elsewhere.
		s.mu.Unlock()
		if m.Reply != "" {
			m.Respond([]byte("gone"))
		}
		return
	}
	if f.Seq != s.next {
		// Core NATS is at-most-once: frames in flight through a NATS
		// server that died are lost. Continue on a worker from the tokens
		// the client has (or fail if the job cannot resume).
		w, next := s.worker, s.next
		s.mu.Unlock()
		s.c.failover(s.c.stopCtx, s, w, fmt.Sprintf("lost part of the stream from worker %s (frame %d, want %d)", w, f.Seq, next), false)
		return
	}
	s.next++
	s.lastFrame = time.Now()
	if f.Kind == cluster.FrameHandoff {
		// drain: the worker stopped the job on purpose; continue it on
		// another worker from the tokens the client has.
		w := s.worker
		s.mu.Unlock()
		s.c.failover(s.c.stopCtx, s, w, fmt.Sprintf("worker %s stopped the job (draining or shutting down)", w), true)
		return
	}
	switch f.Kind {
	case cluster.FrameStart:
		s.worker = string(f.Payload)
		s.workerAddr = ""
		if m, ok := s.c.ml.Member(s.worker); ok {
			s.workerAddr = m.Addr
		}
		if s.attempts == 0 { // queue wait: the first start only, not failovers
			s.c.cfg.Metrics.ObserveQueueWait(s.model, time.Since(s.submitted))
		}
		s.mu.Unlock()
		if m.Reply != "" {
			m.Respond([]byte("ok"))
		}
		return
	case cluster.FrameEvent:
		var ce cluster.Event
		if err := json.Unmarshal(f.Payload, &ce); err != nil {
			s.push(&job.Event{Worker: s.worker, Err: openai.ServerError("malformed event from worker: %v", err)}, 0, nil)
			s.done = true
		} else {
			choice := ce.Event.Choice
			s.push(s.track(&ce), choice, ce.Tokens)
		}
	case cluster.FrameError:
		oe := cluster.DecodeError(f.Payload)
		if oe.Status == http.StatusServiceUnavailable {
			// The worker cannot go on (it is shutting down, its engine
			// closed, it cannot resume): continue on another worker from
			// the tokens the client has, or fail with this error.
			w := s.worker
			s.mu.Unlock()
			s.c.failover(s.c.stopCtx, s, w, oe.Message, true)
			return
		}
		s.push(&job.Event{Worker: s.worker, Err: oe}, 0, nil)
		s.done = true
	case cluster.FrameEnd:
		s.done = true
	default:
		s.push(&job.Event{Worker: s.worker, Err: openai.ServerError("unknown frame kind %q", f.Kind)}, 0, nil)
		s.done = true
	}
	if s.done {
		s.c.streams.Delete(s.id)
		s.journalEnd(false)
	}
	s.mu.Unlock()
	s.wake()
}

// track records what a failover needs from an event (tokens, role and
// finish per choice) and drops what a resumed attempt repeats. It returns
// the event to deliver, or nil. s.mu is held.
func (s *stream) track(ce *cluster.Event) *job.Event {
	ev := &ce.Event
	i := ev.Choice
	hasText := ev.Text != "" || ev.Reasoning != "" || len(ev.ToolCalls) > 0
	// A choice's last event may carry only flushed held-back text whose
	// tokens went with earlier events: nothing of it is left to resume.
	if hasText && len(ce.Tokens) == 0 && ev.FinishReason == "" {
		s.resumable = false
	}
	if s.roleSent == nil {
		s.roleSent, s.finished = map[int]bool{}, map[int]bool{}
	}
	if s.attempts > 0 && s.finished[i] && ev.Usage == nil && ev.Err == nil {
		return nil // a choice that ended before the failover
	}
	if i >= 0 && i < 1024 {
		for len(s.tokens) <= i {
			s.tokens = append(s.tokens, nil)
		}
		s.tokens[i] = append(s.tokens[i], ce.Tokens...)
	}
	if ev.Role != "" {
		if s.roleSent[i] {
			ev.Role = ""
		}
		s.roleSent[i] = true
	}
	if ev.FinishReason != "" {
		if s.finished[i] {
			ev.FinishReason = "" // given before the failover; keep only the usage
		}
		s.finished[i] = true
	}
	if !hasText && ev.Role == "" && ev.FinishReason == "" && ev.Usage == nil && ev.Err == nil && ev.Logprobs == nil && len(ev.Embeddings) == 0 {
		return nil
	}
	return ev
}

// maxFailovers bounds how often one job moves to another worker.
const maxFailovers = 3

// maxPipelineFailovers is maxFailovers for a pipelined model: any of its
// stages' workers can fail it.
const maxPipelineFailovers = 8

// failover moves a running job whose worker (w) died or stalled to another
// worker: it is requeued under a new id with the tokens the client already
// has, and the new worker continues from them (job.ResumeEngine). A job
// that cannot resume (its engine reports no token ids, no other live worker
// serves the model, too many failovers) fails with a 503 event instead.
func (c *Coordinator) failover(ctx context.Context, s *stream, w, reason string, needOther bool) {
	s.mu.Lock()
	if s.done || s.worker != w {
		s.mu.Unlock()
		return
	}
	others := false
	for _, m := range c.workersFor(s.model) {
		others = others || !needOther || m.Name != w
	}
	limit := maxFailovers
	pipelined := c.pipelined(s.model)
	if pipelined {
		// pipelines.go: the re-placed pipeline (often headed by the same
		// worker) takes the job from the queue; a stage lost while the job
		// runs there is one more failover.
		others, needOther, limit = true, false, maxPipelineFailovers
	}
	if !s.resumable || !others || s.attempts >= limit || s.job.Kind == job.KindEmbedding {
		s.mu.Unlock()
		s.fail(unavailable("%s", reason))
		return
	}
	c.requeueMu.Lock()
	if c.closing {
		c.requeueMu.Unlock()
		s.mu.Unlock()
		s.fail(unavailable("%s (coordinator shutting down)", reason))
		return
	}
	c.requeues.Add(1)
	c.requeueMu.Unlock()
	oldID, id := s.id, nuid.Next()
	s.id = id
	s.worker, s.next, s.queueSeq = "", 0, 0
	s.attempts++
	resume := make([][]int, len(s.tokens))
	for i, t := range s.tokens {
		resume[i] = append([]int{}, t...)
	}
	if len(resume) == 0 {
		resume = [][]int{{}}
	}
	attempt := s.attempts
	s.mu.Unlock()
	c.streams.Store(id, s)
	c.streams.Delete(oldID)
	c.nc.Publish(cluster.CancelSubject(oldID), nil) // a stalled worker stops
	c.log.Info("failing over", "job", oldID, "new_job", id, "request", s.job.ID, "reason", reason,
		"attempt", attempt, "tokens", len(resume[0]))
	c.cfg.Metrics.Failover("worker") // nil-safe

	body, err := json.Marshal(cluster.Job{Job: *s.job, Resume: resume})
	if err != nil {
		c.requeues.Done()
		s.fail(openai.ServerError("encode job: %v", err))
		return
	}
	msg := nats.NewMsg(cluster.JobsSubject(s.job.Model, s.job.APIKey))
	msg.Header.Set(cluster.HeaderReply, cluster.ReplySubject(c.cfg.Name, id))
	msg.Header.Set(cluster.HeaderJob, id)
	msg.Header.Set(jetstream.MsgIDHeader, id)
	msg.Data = body
	// Published off the caller's goroutine (it may wait for a stream leader).
	go func() {
		defer c.requeues.Done()
		// A pipelined model's job is not offered: the worker that lost its
		// stage must not take it back before its new plan runs.
		if !pipelined && c.offerFailover(ctx, s, msg, w, needOther) {
			return
		}
		ack, err := c.publish(ctx, msg)
		if err != nil {
			s.fail(unavailable("%s; requeueing it failed: %v", reason, err))
			return
		}
		s.mu.Lock()
		if s.id == id && s.worker == "" {
			s.queueSeq = ack.Sequence
		}
		s.mu.Unlock()
	}()
}

// offerFailover offers a failed-over job to a live worker over core NATS
// (the offer of prefix routing) before it is queued: the worker it ran on
// first, when it may be used (a gap in its frames: it is alive and holds
// the prompt in its cache), then the others with the most free slots. A
// requeue through JetStream waits for the stream's leader, and the failure
// that lost the frames (a coordinator and its NATS server killed) often
// took that leader with it: surviving streams stalled for seconds while
// JetStream elected a new one. The workers of such a failure are
// reconnecting to another NATS server meanwhile (their offers find no
// responder), so the offers are repeated for up to failoverOfferFor. It
// reports whether a worker took the job.
func (c *Coordinator) offerFailover(ctx context.Context, s *stream, msg *nats.Msg, w string, needOther bool) bool {
	deadline := time.Now().Add(failoverOfferFor)
	for {
		var cands []cluster.Member
		for _, m := range c.workersFor(s.model) {
			if m.Name != w || !needOther {
				cands = append(cands, m)
			}
		}
		slices.SortStableFunc(cands, func(a, b cluster.Member) int {
			if (a.Name == w) != (b.Name == w) {
				if a.Name == w {
					return -1
				}
				return 1
			}
			return b.Meta.Free - a.Meta.Free
		})
		for i, m := range cands {
			if i == maxOffers {
				break
			}
			if c.offer(ctx, s, msg, m.Name) {
				return true
			}
		}
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(failoverOfferRetry):
		}
	}
}

// How long, and how often, a failed-over job is offered before it is queued.
const (
	failoverOfferFor   = 1500 * time.Millisecond
	failoverOfferRetry = 50 * time.Millisecond
)

// fail ends the stream with an error event (none for a nil e) unless it
// already ended.
func (s *stream) fail(e *openai.Error) {
	s.mu.Lock()
	if !s.done {
		if e != nil {
			s.push(&job.Event{Worker: s.worker, Err: e}, 0, nil)
		}
		s.done = true
		s.c.streams.Delete(s.id)
		s.journalEnd(e == nil)
	}
	s.mu.Unlock()
	s.wake()
}

// Recv implements job.Stream. On a journaled stream an event is returned
// once the journal holds it (resume.go: a client never has an event that a
// coordinator resuming the stream could not replay), or once the journal
// is behind by journalWait (its JetStream leader is being elected: the
// stream goes on, resumable again when the journal catches up).
func (s *stream) Recv(ctx context.Context) (*job.Event, error) {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		s.mu.Lock()
		wait := time.Duration(0)
		if len(s.events) > 0 {
			if wait = s.jr.holdFor(s.evK[0], time.Now()); wait == 0 {
				ev := s.events[0]
				s.events[0] = nil
				s.events, s.evK = s.events[1:], s.evK[1:]
				s.mu.Unlock()
				return ev, nil
			}
		} else if s.done {
			if wait = s.jr.holdEnd(time.Now()); wait == 0 {
				s.mu.Unlock()
				return nil, io.EOF
			}
		}
		s.mu.Unlock()
		var tc <-chan time.Time
		if wait > 0 {
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			tc = timer.C
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-s.notify:
		case <-tc:
		}
	}
}

// Close implements job.Stream: a running job is cancelled on its worker, a
// queued one is deleted from the queue.
func (s *stream) Close() error {
	s.closeOnce.Do(func() {
		if s.release != nil {
			defer s.release()
		}
		s.mu.Lock()
		finished := s.done
		s.done = true
		worker, seq, id := s.worker, s.queueSeq, s.id
		if !finished {
			s.journalEnd(true) // cancelled: a resuming client gets a 404
		}
		s.mu.Unlock()
		s.c.streams.Delete(id)
		if finished {
			return
		}
		// The worker may be taking it right now: the cancel covers a
		// running job, the delete a queued one, and the start handshake
		// (answered "gone" from now on) the race between them.
		s.c.nc.Publish(cluster.CancelSubject(id), nil)
		if worker == "" && seq != 0 {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			st, err := s.c.js.Stream(ctx, cluster.StreamName(s.model))
			if err == nil {
				err = st.DeleteMsg(ctx, seq)
			}
			if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
				s.c.log.Debug("delete queued job", "job", id, "err", err)
			}
		}
	})
	return nil
}
