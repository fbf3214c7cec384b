package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestRun_PrintsMediansAndTargets(t *testing.T) {
	in := `goos: linux
pkg: github.com/apiserver-operator/apiserver-operator/test/bench
BenchmarkConverge/objects=1000-2   1   35000000000 ns/op   190.0 peak-rss-MiB
BenchmarkConverge/objects=1000-2   1   28000000000 ns/op   180.0 peak-rss-MiB
BenchmarkConverge/objects=1000-2   1   29000000000 ns/op   210.0 peak-rss-MiB
--- BENCH: BenchmarkSteadyState-2
BenchmarkSteadyState-2   1   3 writes/window
BenchmarkFullPKI/ecdsa-p256-2   1000   1200000 ns/op
`
	var out bytes.Buffer
	if err := run(nil, strings.NewReader(in), &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| Converge/objects=1000 | time/op | 29 s | 3 | < 30 s (met) |",
		"| Converge/objects=1000 | peak-rss-MiB | 190 | 3 | < 200 MiB (met) |",
		"| SteadyState | writes/window | 3 | 1 | 0 (missed) |",
		"| FullPKI/ecdsa-p256 | time/op | 1.2 ms | 1 |  |",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the table lacks %q:\n%s", want, out.String())
		}
	}
}

func TestRun_RefusesInputWithoutResults(t *testing.T) {
	if err := run(nil, strings.NewReader("PASS\nok  \tpkg\t0.1s\n"), &bytes.Buffer{}); err == nil {
		t.Fatal("no error for output without benchmark results")
	}
}
