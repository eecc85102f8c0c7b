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
