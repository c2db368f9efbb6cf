package telemetry

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/engine"
)

// BenchmarkDeliverySpans is the tracing cost of one acknowledged delivery with one emit: the
// consumer, handler, emit and settlement spans, exported to a collector that takes everything;
// sampled, and not (sample_ratio 0: spans made, not recorded, traceparents still written).
func BenchmarkDeliverySpans(b *testing.B) {
	b.Run("sampled", func(b *testing.B) { benchSpans(b, 1) })
	b.Run("unsampled", func(b *testing.B) { benchSpans(b, 0) })
}

func benchSpans(b *testing.B, ratio float64) {
	c := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer c.Close()
	p, err := New(context.Background(), Config{Endpoint: c.URL, SampleRatio: ratio}, zerolog.Nop())
	if err != nil {
		b.Fatal(err)
	}
	tr := p.Pipeline("orders", "redis")
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		d := &engine.Delivery{Message: engine.Message{Key: "orders", ID: "1-0", Headers: map[string]string{}}, Attempt: 1}
		dctx, sp := tr.Start(ctx, d)
		_, end := sp.Handler(dctx)
		end(nil)
		sp.Emit(engine.Target{Kind: "stream"}, &engine.Message{Key: "out"})(nil)
		sp.Settle(engine.ActAck)(nil)
		sp.End("ack", nil)
	}
	b.StopTimer()
	p.Shutdown(ctx)
	b.ReportMetric(float64(p.Dropped())/float64(b.N), "dropped/op")
}
