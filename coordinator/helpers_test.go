package coordinator_test

import (
	"context"

	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/internal/clustertest"
	"github.com/macpool/macpool/job"
)

// The in-process cluster helpers of internal/clustertest, under the names
// this package's tests use.
const testModel = clustertest.Model

var (
	testLogger       = clustertest.Logger
	eventually       = clustertest.Eventually
	runNode          = clustertest.Run
	coordConfig      = clustertest.CoordConfig
	startCoordinator = clustertest.StartCoordinator
	startWorker      = clustertest.StartWorker
	chatJob          = clustertest.ChatJob
	waitWorkers      = clustertest.WaitWorkers
	words            = clustertest.Words
	queued           = clustertest.Queued
)

type node = clustertest.Node

type result struct {
	worker string
	text   string
	finish string
	err    *openai.Error
}

func collect(ctx context.Context, s job.Stream) (result, error) {
	r, err := clustertest.Collect(ctx, s)
	return result{worker: r.Worker, text: r.Text, finish: r.Finish, err: r.Err}, err
}

func submit(ctx context.Context, svc clustertest.Submitter, j *job.Job) (result, error) {
	s, err := svc.Submit(ctx, j)
	if err != nil {
		return result{}, err
	}
	return collect(ctx, s)
}
