package main

import (
	"encoding/json"
	"math"
	"sort"
)

// percentile returns the p-th percentile (0 ≤ p ≤ 100) of xs by linear
// interpolation between the closest ranks (the "R-7" definition, as
// numpy's default); NaN for no values. xs is not modified.
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if p <= 0 {
		return s[0]
	}
	if p >= 100 {
		return s[len(s)-1]
	}
	h := (float64(len(s)) - 1) * p / 100
	lo := math.Floor(h)
	i := int(lo)
	if i+1 >= len(s) {
		return s[i]
	}
	return s[i] + (h-lo)*(s[i+1]-s[i])
}

// summary is the median and range of one figure over the rounds.
type summary struct {
	Median optFloat `json:"median"`
	Min    optFloat `json:"min"`
	Max    optFloat `json:"max"`
	N      int      `json:"n"`
}

// optFloat is a float that is null in JSON when it is NaN (no figure).
type optFloat float64

// MarshalJSON writes null for NaN and infinities, else the number.
func (f optFloat) MarshalJSON() ([]byte, error) {
	x := float64(f)
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return []byte("null"), nil
	}
	return json.Marshal(x)
}

// summarize returns the median (the mean of the middle two for an even
// count), minimum and maximum of xs, ignoring NaNs; N is 0 when nothing is
// left.
func summarize(xs []float64) summary {
	var v []float64
	for _, x := range xs {
		if !math.IsNaN(x) {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		nan := optFloat(math.NaN())
		return summary{Median: nan, Min: nan, Max: nan}
	}
	sort.Float64s(v)
	m := v[len(v)/2]
	if len(v)%2 == 0 {
		m = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return summary{Median: optFloat(m), Min: optFloat(v[0]), Max: optFloat(v[len(v)-1]), N: len(v)}
}
