package pipeline

// Per-hop cost of handing a batch's hidden states to the next stage on
// loopback, over this package's mutual-TLS TCP connection and, for
// comparison, over an in-process NATS server (core request/reply, with the
// mutual TLS the cluster's embedded servers use). The payloads are the same
// encoded frames on both. Run:
//
//	go test -run X -bench 'Hop|Stream' -benchtime 2s ./pipeline/
//
// Hop: ns/op is one round trip (the frame one way, a one-token frame back:
// what a decode step's hand-off plus the sampled token's return costs),
// MB/s the frame's bytes over that time. Stream: frames back to back without
// waiting (a pipeline kept busy by micro-batches); MB/s is the throughput.

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

var benchShapes = []struct{ width, rows int }{
	{2048, 1}, {2048, 8}, {2048, 512},
	{4096, 1}, {4096, 8}, {4096, 512},
}

func benchFrame(width, rows int) *Frame {
	counts := make([]int, 0, rows)
	if rows >= 64 {
		counts = append(counts, rows) // a prefill chunk of one sequence
	} else {
		for range rows {
			counts = append(counts, 1) // decode steps of rows sequences
		}
	}
	return testFrame(uint64(width+rows), width, F32, counts...)
}

// ack is the small frame sent back (a sampled token).
func ack() *Frame {
	return &Frame{Seqs: []Seq{{ID: 1, Tokens: []int{42}}}, Rows: 1, Cols: 0}
}

func encoded(b testing.TB, f *Frame) []byte {
	var buf bytes.Buffer
	if _, err := writeFrame(&buf, f, nil); err != nil {
		b.Fatal(err)
	}
	return buf.Bytes()
}

func BenchmarkHop(b *testing.B) {
	for _, sh := range benchShapes {
		b.Run(fmt.Sprintf("tcp-tls/w=%d/rows=%d", sh.width, sh.rows), func(b *testing.B) {
			a, peer := pair(b, newSecret(b))
			f := benchFrame(sh.width, sh.rows)
			ctx := context.Background()
			done := make(chan error, 1)
			go func() { // the next stage: receive, answer
				var in Frame
				reply := ack()
				for {
					if err := peer.Recv(ctx, &in); err != nil {
						done <- nil
						return
					}
					if err := peer.Send(ctx, reply); err != nil {
						done <- err
						return
					}
				}
			}()
			var back Frame
			b.SetBytes(int64(len(encoded(b, f))))
			b.ResetTimer()
			for b.Loop() {
				if err := a.Send(ctx, f); err != nil {
					b.Fatal(err)
				}
				if err := a.Recv(ctx, &back); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			a.Close()
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		})
		b.Run(fmt.Sprintf("nats-tls/w=%d/rows=%d", sh.width, sh.rows), func(b *testing.B) {
			nc, stop := natsPair(b)
			defer stop()
			f := benchFrame(sh.width, sh.rows)
			reply := encoded(b, ack())
			sub, err := nc.Subscribe("stage.1", func(m *nats.Msg) {
				var in Frame
				if _, err := readFrame(bytes.NewReader(m.Data), &in, nil, 1<<30); err != nil {
					panic(err)
				}
				m.Respond(reply)
			})
			if err != nil {
				b.Fatal(err)
			}
			defer sub.Unsubscribe()
			var buf bytes.Buffer
			var back Frame
			b.SetBytes(int64(len(encoded(b, f))))
			b.ResetTimer()
			for b.Loop() {
				buf.Reset()
				if _, err := writeFrame(&buf, f, nil); err != nil {
					b.Fatal(err)
				}
				m, err := nc.Request("stage.1", buf.Bytes(), 30*time.Second)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := readFrame(bytes.NewReader(m.Data), &back, nil, 1<<20); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkStream(b *testing.B) {
	for _, sh := range benchShapes {
		b.Run(fmt.Sprintf("tcp-tls/w=%d/rows=%d", sh.width, sh.rows), func(b *testing.B) {
			a, peer := pair(b, newSecret(b))
			f := benchFrame(sh.width, sh.rows)
			ctx := context.Background()
			got := make(chan int, 1)
			go func() {
				var in Frame
				n := 0
				for peer.Recv(ctx, &in) == nil {
					n++
				}
				got <- n
			}()
			b.SetBytes(int64(len(encoded(b, f))))
			b.ResetTimer()
			sent := 0
			for b.Loop() {
				if err := a.Send(ctx, f); err != nil {
					b.Fatal(err)
				}
				sent++
			}
			// Wait for the receiver: the time includes the last frame's arrival.
			a.Close()
			if n := <-got; n != sent {
				b.Fatalf("received %d of %d frames", n, sent)
			}
		})
		b.Run(fmt.Sprintf("nats-tls/w=%d/rows=%d", sh.width, sh.rows), func(b *testing.B) {
			nc, stop := natsPair(b)
			defer stop()
			f := benchFrame(sh.width, sh.rows)
			recv := make(chan struct{}, 1<<16)
			sub, err := nc.Subscribe("stage.1", func(m *nats.Msg) {
				var in Frame
				if _, err := readFrame(bytes.NewReader(m.Data), &in, nil, 1<<30); err != nil {
					panic(err)
				}
				recv <- struct{}{}
			})
			if err != nil {
				b.Fatal(err)
			}
			sub.SetPendingLimits(-1, -1)
			defer sub.Unsubscribe()
			var buf bytes.Buffer
			size := len(encoded(b, f))
			// Bound the bytes in flight (about 32 MiB) so the server does not
			// cut off a slow consumer; TCP bounds its stream the same way.
			window := max(2, (32<<20)/size)
			b.SetBytes(int64(size))
			b.ResetTimer()
			inFlight := 0
			for b.Loop() {
				buf.Reset()
				writeFrame(&buf, f, nil)
				if err := nc.Publish("stage.1", buf.Bytes()); err != nil {
					b.Fatal(err)
				}
				if inFlight++; inFlight == window {
					for range window / 2 {
						<-recv
					}
					inFlight -= window / 2
				}
			}
			for range inFlight {
				<-recv
			}
		})
	}
}

// natsPair starts an in-process NATS server with mutual TLS against a
// fresh cluster CA (as coordinators configure theirs) and a 64 MiB payload
// limit (its maximum; the default 1 MiB does not hold a 512-row frame), and
// connects one client that both requests and serves.
func natsPair(b *testing.B) (*nats.Conn, func()) {
	b.Helper()
	s := newSecret(b)
	stc, err := s.NodeTLS("server")
	if err != nil {
		b.Fatal(err)
	}
	opts := &server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true, MaxPayload: 64 << 20,
		TLSConfig: stc, TLSVerify: true, TLSHandshakeFirst: true, TLSTimeout: 5}
	ns, err := server.NewServer(opts)
	if err != nil {
		b.Fatal(err)
	}
	ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		b.Fatal("nats server not ready")
	}
	ctc, err := s.NodeTLS("client")
	if err != nil {
		b.Fatal(err)
	}
	nc, err := nats.Connect(ns.ClientURL(), nats.Secure(ctc), nats.TLSHandshakeFirst())
	if err != nil {
		b.Fatal(err)
	}
	return nc, func() {
		nc.Close()
		ns.Shutdown()
		ns.WaitForShutdown()
	}
}
