package main

import (
	"regexp"
	"strings"
	"testing"
)

// TestBench runs a small side-by-side bench: both sides complete, every
// proposal is CONFIRMED (a verified share included), and the report has
// its rows and ratio. Numbers are not judged: timing never fails a test.
func TestBench(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the pipeline")
	}
	code, out, errOut := runArgs("bench", "-n", "60", "-inflight", "20", "-rate", "100", "-duration", "300ms", "-ack-share", "0.5")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^raw +\d+ +\S+ +\S+ +\S+ +`),
		regexp.MustCompile(`(?m)^portcullis +\d+ +\S+ +\S+ +\S+ +`),
		regexp.MustCompile(`(?m)^ratio \d+\.\d{3}$`),
	} {
		if !want.MatchString(out) {
			t.Errorf("output lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, "NOT CONFIRMED") {
		t.Errorf("some proposals did not end CONFIRMED:\n%s", out)
	}
}
