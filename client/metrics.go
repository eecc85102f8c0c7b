package client

import (
	"context"
	"math"
	"sort"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/macpool/macpool/metrics"
)

// Metrics are the metric families of one scrape, by name.
type Metrics map[string]*dto.MetricFamily

// Metrics scrapes the coordinator's Prometheus endpoint.
func (c *Client) Metrics(ctx context.Context) (Metrics, error) {
	body, err := c.get(ctx, metrics.Path)
	if err != nil {
		return nil, err
	}
	return ParseMetrics(string(body)), nil
}

// ParseMetrics reads the Prometheus text format. A malformed line ends the
// parse; the families read before it are kept, since a live view is better
// with part of a scrape than with none.
func ParseMetrics(text string) Metrics {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, _ := p.TextToMetricFamilies(strings.NewReader(text))
	if fams == nil {
		return Metrics{}
	}
	return fams
}

func labelsMatch(m *dto.Metric, want map[string]string) bool {
	for k, v := range want {
		found := ""
		for _, l := range m.GetLabel() {
			if l.GetName() == k {
				found = l.GetValue()
				break
			}
		}
		if found != v {
			return false
		}
	}
	return true
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// value is a counter's, gauge's or untyped sample's value.
func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	}
	return 0
}

// Sum adds the samples of name whose labels include match.
func (p Metrics) Sum(name string, match map[string]string) float64 {
	var s float64
	for _, m := range p[name].GetMetric() {
		if labelsMatch(m, match) {
			s += value(m)
		}
	}
	return s
}

// Buckets returns the cumulative histogram buckets (le → count) of name for
// the samples matching match, summed over other labels. A histogram without
// a TYPE line parses as untyped name_bucket samples; those count too.
func (p Metrics) Buckets(name string, match map[string]string) map[float64]float64 {
	out := map[float64]float64{}
	for _, m := range p[name].GetMetric() {
		h := m.GetHistogram()
		if h == nil || !labelsMatch(m, match) {
			continue
		}
		for _, b := range h.GetBucket() {
			out[b.GetUpperBound()] += float64(b.GetCumulativeCount())
		}
		out[math.Inf(1)] += float64(h.GetSampleCount())
	}
	for _, m := range p[name+"_bucket"].GetMetric() {
		if !labelsMatch(m, match) {
			continue
		}
		le, err := strconv.ParseFloat(label(m, "le"), 64)
		if err != nil {
			continue
		}
		out[le] += value(m)
	}
	return out
}

// Quantile estimates quantile q from cumulative buckets (le → count) the
// way PromQL's histogram_quantile does: linear within the bucket, the upper
// bound of the last finite bucket if it falls into +Inf. NaN without
// observations.
func Quantile(q float64, b map[float64]float64) float64 {
	les := make([]float64, 0, len(b))
	for le := range b {
		les = append(les, le)
	}
	sort.Float64s(les)
	if len(les) == 0 {
		return math.NaN()
	}
	total := b[les[len(les)-1]]
	if total <= 0 {
		return math.NaN()
	}
	rank := q * total
	lower, below := 0.0, 0.0
	for _, le := range les {
		c := b[le]
		if c >= rank {
			if math.IsInf(le, 1) {
				return lower
			}
			if c == below {
				return le
			}
			return lower + (le-lower)*(rank-below)/(c-below)
		}
		lower, below = le, c
	}
	return lower
}
