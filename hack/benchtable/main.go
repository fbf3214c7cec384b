// Command benchtable prints the results of `go test -bench` (read from the
// files named, or standard input) as a Markdown table: one row per
// benchmark and measure, the median over -count runs, and the target the
// project set for it, if any. `make bench` pipes its raw output through it;
// compare two revisions' raw outputs with benchstat.
package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/perf/benchfmt"
)

// target is a bound a measure should meet.
type target struct {
	below bool // the value must be below (or at most) limit; else at least
	limit float64
	text  string
}

func (t target) met(v float64) bool {
	if t.below {
		return v <= t.limit
	}
	return v >= t.limit
}

// targets are the goals of issues 8 and 12, by benchmark (as benchfmt names it:
// without "Benchmark" and the -GOMAXPROCS suffix) and unit as benchfmt tidies it (ns/op becomes sec/op).
var targets = map[[2]string]target{
	{"Converge/objects=1000", "sec/op"}:       {true, 30, "< 30 s"},
	{"Converge/objects=1000", "peak-rss-MiB"}: {true, 200, "< 200 MiB"},
	{"Converge/objects=100", "peak-rss-MiB"}:  {true, 200, "< 200 MiB"},
	{"SteadyState", "writes/window"}:          {true, 0, "0"},
	{"ApplyToDeployment", "p99-ms"}:           {true, 50, "< 50 ms"},
	{"TenantReadyz", "ratio"}:                 {true, 1.3, "≤ 1.3"},
	{"Admission/admitted", "p99-ms"}:          {true, 100, "< 100 ms"},
	{"Admission/refused", "p99-ms"}:           {true, 100, "< 100 ms"},
}

var procsSuffix = regexp.MustCompile(`-\d+$`)

type row struct {
	name, unit string
	values     []float64
}

func main() {
	if err := run(os.Args[1:], os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
}

func run(files []string, stdin io.Reader, out io.Writer) error {
	var rows []*row
	index := map[[2]string]*row{}
	read := func(r io.Reader, name string) error {
		br := benchfmt.NewReader(r, name)
		for br.Scan() {
			res, ok := br.Result().(*benchfmt.Result)
			if !ok {
				continue // configuration lines, unit metadata, syntax errors of other output
			}
			name := procsSuffix.ReplaceAllString(string(res.Name.Full()), "")
			for _, v := range res.Values {
				k := [2]string{name, v.Unit}
				if index[k] == nil {
					index[k] = &row{name: name, unit: v.Unit}
					rows = append(rows, index[k])
				}
				index[k].values = append(index[k].values, v.Value)
			}
		}
		return br.Err()
	}
	if len(files) == 0 {
		if err := read(stdin, "stdin"); err != nil {
			return err
		}
	}
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return err
		}
		err = read(fh, f)
		_ = fh.Close() // opened for reading: nothing was lost
		if err != nil {
			return err
		}
	}
	if len(rows) == 0 {
		return errors.New("no benchmark results in the input")
	}
	// The table is written in one piece, so that a failed write is reported.
	var table bytes.Buffer
	fmt.Fprintln(&table, "| Benchmark | Measure | Median | Runs | Target |")
	fmt.Fprintln(&table, "|---|---|---:|---:|---|")
	for _, r := range rows {
		v := median(r.values)
		t := ""
		if tg, ok := targets[[2]string{r.name, r.unit}]; ok {
			mark := "met"
			if !tg.met(v) {
				mark = "missed"
			}
			t = tg.text + " (" + mark + ")"
		}
		value, unit := format(v), r.unit
		if unit == "sec/op" {
			value, unit = duration(v), "time/op"
		}
		fmt.Fprintf(&table, "| %s | %s | %s | %d | %s |\n", r.name, unit, value, len(r.values), t)
	}
	_, err := out.Write(table.Bytes())
	return err
}

// duration prints seconds in the unit that reads best.
func duration(sec float64) string {
	switch {
	case sec >= 1:
		return format(sec) + " s"
	case sec >= 1e-3:
		return format(sec*1e3) + " ms"
	case sec >= 1e-6:
		return format(sec*1e6) + " µs"
	}
	return format(sec*1e9) + " ns"
}

func median(vs []float64) float64 {
	s := slices.Clone(vs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// format prints three significant digits, without an exponent.
func format(v float64) string {
	if v == 0 {
		return "0"
	}
	s := strconv.FormatFloat(v, 'g', 3, 64)
	if strings.ContainsAny(s, "e") {
		s = strconv.FormatFloat(v, 'f', -1, 64)
		if f, err := strconv.ParseFloat(s, 64); err == nil {
			s = strconv.FormatFloat(f, 'f', max(0, 2-int(magnitude(f))), 64)
		}
	}
	return s
}

func magnitude(v float64) float64 {
	m := 0.0
	for v >= 10 {
		v /= 10
		m++
	}
	return m
}
