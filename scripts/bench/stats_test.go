package main

import (
	"math"
	"testing"
)

func TestPercentile(t *testing.T) {
	tests := []struct {
		name string
		xs   []float64
		p    float64
		want float64
	}{
		{"empty is NaN", nil, 50, math.NaN()},
		{"one value", []float64{7}, 99, 7},
		{"median of odd count", []float64{3, 1, 2}, 50, 2},
		{"median of even count interpolates", []float64{4, 1, 3, 2}, 50, 2.5},
		{"p0 is the minimum", []float64{5, 9, 1}, 0, 1},
		{"p100 is the maximum", []float64{5, 9, 1}, 100, 9},
		{"p99 of 1..100", seq(1, 100), 99, 99.01},
		{"p90 of ten values", seq(1, 10), 90, 9.1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := percentile(tt.xs, tt.p)
			if !(math.IsNaN(got) && math.IsNaN(tt.want)) && math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("percentile(%v, %v) = %v, want %v", tt.xs, tt.p, got, tt.want)
			}
		})
	}
}

func TestPercentileLeavesItsInputAlone(t *testing.T) {
	xs := []float64{3, 1, 2}
	percentile(xs, 50)
	if xs[0] != 3 || xs[1] != 1 || xs[2] != 2 {
		t.Errorf("input reordered: %v", xs)
	}
}

func TestSummarize(t *testing.T) {
	tests := []struct {
		name             string
		xs               []float64
		median, min, max float64
		n                int
	}{
		{"odd count", []float64{30, 10, 20}, 20, 10, 30, 3},
		{"even count averages the middle two", []float64{4, 1, 2, 3}, 2.5, 1, 4, 4},
		{"NaNs are skipped", []float64{math.NaN(), 5, math.NaN()}, 5, 5, 5, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := summarize(tt.xs)
			if float64(s.Median) != tt.median || float64(s.Min) != tt.min || float64(s.Max) != tt.max || s.N != tt.n {
				t.Errorf("summarize(%v) = %+v, want median %v min %v max %v n %d", tt.xs, s, tt.median, tt.min, tt.max, tt.n)
			}
		})
	}
}

func TestSummarizeNothingIsNullInJSON(t *testing.T) {
	s := summarize([]float64{math.NaN()})
	if s.N != 0 || !math.IsNaN(float64(s.Median)) {
		t.Fatalf("summarize(NaN) = %+v, want N 0 and a NaN median", s)
	}
	b, err := s.Median.MarshalJSON()
	if err != nil || string(b) != "null" {
		t.Errorf("NaN marshals to %q, %v; want null", b, err)
	}
	if b, _ := optFloat(1.5).MarshalJSON(); string(b) != "1.5" {
		t.Errorf("1.5 marshals to %q", b)
	}
}

func seq(lo, hi int) []float64 {
	var out []float64
	for i := lo; i <= hi; i++ {
		out = append(out, float64(i))
	}
	return out
}
