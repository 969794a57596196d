package main

import "testing"

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{
		"": 0, "1": 1, "512MB": 512 << 20, "512mb": 512 << 20, "20G": 20 << 30, "20GiB": 20 << 30, "3KB": 3 << 10, "1T": 1 << 40,
	} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v, want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"x", "-1", "0", "12XB", "MB", "9999999999T", "1.5GB"} {
		if got, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) = %d, want an error", in, got)
		}
	}
}
