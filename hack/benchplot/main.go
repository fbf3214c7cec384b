// Command benchplot draws the series that `make bench` writes (one
// duration in seconds per line) as SVG plots for the README: how many
// ApiServerConfigs had converged over time after a batch was created, and
// the distribution of the apply-to-Deployment latency. It is a module of
// its own so that the operator does not depend on a plotting library.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

func main() {
	in := flag.String("in", "bin/bench", "directory with the series of make bench")
	out := flag.String("out", "docs/bench", "directory to write the SVG files to")
	flag.Parse()
	if err := run(*in, *out); err != nil {
		fmt.Fprintln(os.Stderr, "benchplot:", err)
		os.Exit(1)
	}
}

func run(in, out string) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	converge, err := plotConverge(in)
	if err != nil {
		return err
	}
	if err := converge.Save(6*vg.Inch, 3.5*vg.Inch, filepath.Join(out, "converge.svg")); err != nil {
		return err
	}
	latency, err := plotLatency(in)
	if err != nil {
		return err
	}
	return latency.Save(6*vg.Inch, 3.5*vg.Inch, filepath.Join(out, "apply-to-deployment.svg"))
}

// readSeries reads one number per line, sorted ascending by the writer.
func readSeries(path string) ([]float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading the series of make bench (run it first): %w", err)
	}
	defer f.Close()
	var out []float64
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := strings.TrimSpace(s.Text())
		if line == "" {
			continue
		}
		v, err := strconv.ParseFloat(line, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, v)
	}
	return out, s.Err()
}

func plotConverge(in string) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "ApiServerConfigs converged after a batch is created"
	p.X.Label.Text = "seconds since the first create"
	p.Y.Label.Text = "converged"
	p.Add(plotter.NewGrid())
	colors := []color.Color{color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
		color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}}
	// Every fleet size the run measured (converge-<N>.txt), smallest first.
	files, err := filepath.Glob(filepath.Join(in, "converge-*.txt"))
	if err != nil {
		return nil, err
	}
	var sizes []int
	for _, f := range files {
		if n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), "converge-"), ".txt")); err == nil {
			sizes = append(sizes, n)
		}
	}
	if len(sizes) == 0 {
		return nil, fmt.Errorf("no converge-<N>.txt in %s", in)
	}
	slices.Sort(sizes)
	for i, n := range sizes {
		times, err := readSeries(filepath.Join(in, fmt.Sprintf("converge-%d.txt", n)))
		if err != nil {
			return nil, err
		}
		pts := make(plotter.XYs, 0, len(times)+1)
		pts = append(pts, plotter.XY{})
		for j, t := range times {
			pts = append(pts, plotter.XY{X: t, Y: float64(j + 1)})
		}
		line, err := plotter.NewLine(pts)
		if err != nil {
			return nil, err
		}
		line.Color = colors[i%len(colors)]
		line.Width = vg.Points(1.5)
		p.Add(line)
		p.Legend.Add(fmt.Sprintf("N = %d", n), line)
	}
	p.Legend.Top, p.Legend.Left = true, true
	return p, nil
}

func plotLatency(in string) (*plot.Plot, error) {
	ms, err := readSeries(filepath.Join(in, "apply-to-deployment.txt"))
	if err != nil {
		return nil, err
	}
	p := plot.New()
	p.Title.Text = "Apply to Deployment created, one object at a time"
	p.X.Label.Text = "milliseconds"
	p.Y.Label.Text = "share of creates (cumulative)"
	p.Add(plotter.NewGrid())
	pts := make(plotter.XYs, len(ms))
	for i, v := range ms {
		pts[i] = plotter.XY{X: v * 1000, Y: float64(i+1) / float64(len(ms))}
	}
	line, err := plotter.NewLine(pts)
	if err != nil {
		return nil, err
	}
	line.Width = vg.Points(1.5)
	p.Add(line)
	return p, nil
}
