// Command apogee-hdrplot renders the interval logs apogee-bench writes with
// --hdr-out as a percentile-distribution plot (PNG), one line per series
// (tag) and log, the way HdrHistogram's plotter draws them (drawn with
// gonum.org/v1/plot, which only this command links: apogee-bench and the
// broker do not); with
// --percentiles it prints the same distributions as text in the
// HdrHistogram format (.hgrm) other tools read. See docs/bench.md.
//
//	apogee-hdrplot [-o FILE.png] [--tags send,e2e] [--title TEXT] [--labels A,B] [--log-y] LOG...
package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/pflag"

	"github.com/apogeemq/apogee/benchmark"
	"github.com/apogeemq/apogee/internal/version"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "apogee-hdrplot:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := pflag.NewFlagSet("apogee-hdrplot", pflag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: apogee-hdrplot [flags] LOG...\n\n%s", fs.FlagUsages())
	}
	out := fs.StringP("output", "o", "latency.png", "the PNG to write")
	tags := fs.StringSlice("tags", []string{"send", "e2e"}, "the series to plot (send, e2e, delay); the ones a log lacks are skipped")
	labels := fs.StringSlice("labels", nil, "a name per log for the legend (default: the file names)")
	title := fs.String("title", "", "title above the plot")
	width := fs.Int("width", 960, "width in pixels")
	height := fs.Int("height", 600, "height in pixels")
	logY := fs.Bool("log-y", false, "latency on a logarithmic scale (for series of very different magnitudes)")
	hgrm := fs.Bool("percentiles", false, "also print each series' percentile distribution (HdrHistogram's .hgrm text, in ms) to standard output")
	showVersion := fs.Bool("version", false, "print the version and the commit, and exit")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *showVersion {
		fmt.Println(version.Get().String("apogee-hdrplot"))
		return nil
	}
	files := fs.Args()
	if len(files) == 0 {
		fs.Usage()
		return errors.New("no log given")
	}
	if len(*labels) > 0 && len(*labels) != len(files) {
		return fmt.Errorf("--labels gives %d names for %d logs", len(*labels), len(files))
	}
	var series []plotSeries
	for i, path := range files {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		log, err := benchmark.ReadHdrLog(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		name := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
		if len(*labels) > 0 {
			name = (*labels)[i]
		}
		logTags, hs := log.Merged()
		found := 0
		for _, tag := range *tags {
			if !slices.Contains(logTags, tag) {
				continue
			}
			found++
			label := tag
			if len(files) > 1 {
				label = name + " " + tag
			}
			series = append(series, plotSeries{Label: label, Histogram: hs[tag]})
		}
		if found == 0 {
			return fmt.Errorf("%s: none of the tags %q (the log has %q)", path, *tags, logTags)
		}
	}
	if *hgrm {
		for _, s := range series {
			fmt.Printf("# %s (values in ms)\n", s.Label)
			if _, err := s.Histogram.PercentilesPrint(os.Stdout, 5, 1e6); err != nil {
				return err
			}
			fmt.Println()
		}
	}
	f, err := os.Create(*out)
	if err != nil {
		return err
	}
	if err := plotPercentiles(f, series, plotOptions{Title: *title, Width: *width, Height: *height, LogY: *logY}); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "wrote %s\n", *out)
	return nil
}
