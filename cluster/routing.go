package cluster

// Prefix-aware routing (docs/cluster.md, "Prefix-aware routing"):
//
//	macpool.prefix.<model>.<node>  core NATS, worker -> coordinators: JSON PrefixSummary,
//	                               about once a second and soon after it changes
//	macpool.offer.<model>.<node>   core NATS request, coordinator -> one worker: a job with
//	                               the headers and body it would have on the queue;
//	                               answered OfferTaken or OfferBusy
//
// <model> and <node> are Tokens of the model and node names.
const (
	SubjectPrefixPrefix = "macpool.prefix."
	SubjectOfferPrefix  = "macpool.offer."

	// OfferTaken answers an offer the worker runs now (a start frame follows).
	OfferTaken = "ok"
	// OfferBusy answers an offer the worker cannot run now; the coordinator
	// queues the job instead.
	OfferBusy = "busy"
)

// PrefixSubject is where node publishes its prefix summary for model.
func PrefixSubject(model, node string) string {
	return SubjectPrefixPrefix + Token(model) + "." + Token(node)
}

// PrefixFilter matches every prefix summary.
func PrefixFilter() string { return SubjectPrefixPrefix + ">" }

// OfferSubject is where node takes offered jobs for model.
func OfferSubject(model, node string) string {
	return SubjectOfferPrefix + Token(model) + "." + Token(node)
}

// PrefixSummary is what a worker advertises about one model's prefix cache:
// the engine/prefixkey keys of the requests it served most recently and how
// much KV room it has. Keys travel over NATS, not gossip: 64 keys are
// ~1.4 KB, well over memberlist's 512-byte metadata.
type PrefixSummary struct {
	Node       string   `json:"node"`
	Model      string   `json:"model"`
	Keys       []uint64 `json:"keys"`                  // most recent first
	BlockSize  int      `json:"block_size,omitempty"`  // KV positions per block (0: no paged pool)
	Blocks     int      `json:"blocks,omitempty"`      // KV pool size
	FreeBlocks int      `json:"free_blocks,omitempty"` // free or evictable now
}
