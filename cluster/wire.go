package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/macpool/macpool/job"
)

// NATS subjects and JetStream names.
//
//	macpool.jobs.<model>.<key>   JetStream work-queue stream JOBS_<model>, one per model;
//	                             body = JSON job.Job, headers below
//	macpool.reply.<coord>.<id>   core NATS, worker -> coordinator: frames of one job
//	macpool.cancel.<id>          core NATS, coordinator -> workers: stop job id
//	macpool.raft.apply           core NATS request, follower -> Raft leader: forwarded write
//	macpool.drain.<node>         core NATS request, coordinator -> worker: drain and leave
//	macpool.sse.<req>            JetStream stream macpool_sse: the journal of a resumable SSE
//	                             stream (request id <req>), written by the coordinator that
//	                             relays it, read by any coordinator a client resumes on
//	macpool.sselive.<req>        core NATS request, resuming coordinator -> the one relaying
//	                             <req>: "ok" while it does (and its grace is extended)
//
// <model>, <key> and <coord> are Tokens of the model name, API key id and
// coordinator name; <id> is the coordinator's job id (a NUID).
const (
	SubjectJobsPrefix    = "macpool.jobs."
	SubjectReplyPrefix   = "macpool.reply."
	SubjectCancelPrefix  = "macpool.cancel."
	SubjectRaftApply     = "macpool.raft.apply"
	SubjectDrainPrefix   = "macpool.drain."
	SubjectSSEPrefix     = "macpool.sse."
	SubjectSSELivePrefix = "macpool.sselive."
	// SSEStreamName is the JetStream stream of the SSE journals.
	SSEStreamName = "macpool_sse"

	// HeaderReply names the subject a worker sends the job's frames to.
	HeaderReply = "Macpool-Reply"
	// HeaderJob is the coordinator job id (the <id> in reply and cancel subjects).
	HeaderJob = "Macpool-Job"
	// ConsumerName is the durable pull consumer shared by all workers of a model.
	ConsumerName = "workers"
)

// Token turns an arbitrary name into a NATS subject token that is also a
// valid JetStream stream name: lowercase [a-z0-9_-] plus a hash suffix so
// distinct names never collide.
func Token(name string) string {
	if name == "" {
		return "anon"
	}
	var b strings.Builder
	for _, r := range strings.ToLower(name) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
		if b.Len() >= 40 {
			break
		}
	}
	h := fnv.New32a()
	h.Write([]byte(name))
	return fmt.Sprintf("%s_%08x", b.String(), h.Sum32())
}

// StreamName is the JetStream stream queueing jobs for model.
func StreamName(model string) string { return "JOBS_" + Token(model) }

// JobsSubject is the subject a job for model from API key id key is published on.
func JobsSubject(model, key string) string {
	return SubjectJobsPrefix + Token(model) + "." + Token(key)
}

// JobsFilter matches every job subject of model.
func JobsFilter(model string) string { return SubjectJobsPrefix + Token(model) + ".*" }

// ReplySubject is where the frames of job id for coordinator coord go.
func ReplySubject(coord, id string) string { return SubjectReplyPrefix + Token(coord) + "." + id }

// ReplyFilter matches every reply subject of coordinator coord.
func ReplyFilter(coord string) string { return SubjectReplyPrefix + Token(coord) + ".*" }

// DrainSubject is where a coordinator asks worker node to drain (a
// request with a JSON DrainRequest; the worker answers with a DrainReply).
func DrainSubject(node string) string { return SubjectDrainPrefix + Token(node) }

// DrainRequest asks a worker to stop taking jobs, finish (or after
// TimeoutMS hand off) the running ones and leave the cluster.
type DrainRequest struct {
	// TimeoutMS bounds the wait for running jobs; 0: the worker's default.
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
}

// DrainReply is a worker's answer to a DrainRequest.
type DrainReply struct {
	Node    string `json:"node"`
	Running int    `json:"running"` // jobs still running when the drain began
	Error   string `json:"error,omitempty"`
}

// CancelSubject is where the cancel for job id is published.
func CancelSubject(id string) string { return SubjectCancelPrefix + id }

// Frame kinds sent from a worker to the coordinator on a job's reply subject.
const (
	// FrameStart is sent as a request when a worker takes a job; the
	// coordinator answers "ok" if the client still waits. No responders means
	// the requester is gone and the worker drops the job.
	FrameStart byte = 's'
	// FramePing is sent as a request every Worker.PingInterval while a job
	// runs; "ok" means the client still waits, "gone" or no responders
	// (coordinator died) makes the worker stop the job. Its Seq is 0 and
	// outside the sequence.
	FramePing byte = 'p'
	// FrameEvent carries one JSON job.Event.
	FrameEvent byte = 'e'
	// FrameError carries a JSON ErrorBody; it ends the stream.
	FrameError byte = 'x'
	// FrameEnd ends the stream normally.
	FrameEnd byte = 'd'
	// FrameHandoff ends the worker's part of the stream without an error:
	// the worker is draining and stopped the job; the coordinator moves it
	// to another worker from the tokens the client has (failover), or
	// fails it with a 503 when it cannot resume. Sent as a request, like
	// FrameEnd and FrameError.
	FrameHandoff byte = 'h'
)

// Frame is one message of a job's reply stream. Seq starts at 0 (the start
// frame) and increases by one; the coordinator treats a gap as a failed job.
type Frame struct {
	Kind    byte
	Seq     uint64
	Payload []byte
}

// ErrShortFrame is returned by ParseFrame for a message under 9 bytes.
var ErrShortFrame = errors.New("frame shorter than 9 bytes")

// AppendFrame appends the wire form (kind, big-endian seq, payload) to dst.
func AppendFrame(dst []byte, kind byte, seq uint64, payload []byte) []byte {
	dst = append(dst, kind)
	dst = binary.BigEndian.AppendUint64(dst, seq)
	return append(dst, payload...)
}

// ParseFrame decodes a frame; Payload aliases b.
func ParseFrame(b []byte) (Frame, error) {
	if len(b) < 9 {
		return Frame{}, ErrShortFrame
	}
	return Frame{Kind: b[0], Seq: binary.BigEndian.Uint64(b[1:9]), Payload: b[9:]}, nil
}

// Job is the JSON body of a queued job: the API request and, for a job that
// fails over from a worker that died or stalled mid-generation, the tokens
// each choice already produced (their text has reached the client). The
// worker that takes it prefills prompt + Resume[i] and emits only new text.
type Job struct {
	job.Job
	Resume [][]int `json:"resume,omitempty"`
}

// Event is the JSON payload of a FrameEvent: the API event and, from
// engines that can resume, the ids of the tokens whose text it carries
// (the coordinator keeps them to requeue the job on failure).
type Event struct {
	job.Event
	Tokens []int `json:"tk,omitempty"`
}
