package main

import (
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"strconv"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// plotSeries is one line of a percentile plot.
type plotSeries struct {
	Label string
	// Histogram holds the series' values in nanoseconds (the unit of
	// apogee-bench's interval logs).
	Histogram *hdr.Histogram
}

// plotOptions shape a plot. The zero value gives a 960x600 image with no
// title.
type plotOptions struct {
	Title         string
	Width, Height int
	// LogY puts the latency on a logarithmic scale (a grid line per decade),
	// which keeps series of very different magnitudes readable in one plot.
	LogY bool
}

// The series' line colours, in order.
var plotColours = []color.Color{
	color.RGBA{31, 119, 180, 255},
	color.RGBA{214, 39, 40, 255},
	color.RGBA{44, 160, 44, 255},
	color.RGBA{255, 127, 14, 255},
	color.RGBA{148, 103, 189, 255},
	color.RGBA{140, 86, 75, 255},
	color.RGBA{227, 119, 194, 255},
	color.RGBA{23, 190, 207, 255},
}

// plotDPI is the resolution the plot is rasterized at: the canvas is
// Width x Height pixels, its text sized in points at this resolution.
const plotDPI = 96

// plotPercentiles draws the percentile distribution of each series as
// HdrHistogram's plotter does and writes it to w as a PNG, with gonum's
// plot package: latency in milliseconds up the y axis, the percentile along
// the x axis on a scale of nines (0%, 90%, 99%, 99.9%, ...: each step the
// next tenth of the tail), so the median and the far tail are both
// readable. A series' last point is its maximum, at the percentile of its
// last sample. The legend gives each series' p50, p99 and maximum.
func plotPercentiles(w io.Writer, series []plotSeries, o plotOptions) error {
	if len(series) == 0 {
		return errors.New("plot: no series")
	}
	if len(series) > len(plotColours) {
		return fmt.Errorf("plot: at most %d series", len(plotColours))
	}
	if o.Width == 0 {
		o.Width = 960
	}
	if o.Height == 0 {
		o.Height = 600
	}
	if o.Width < 100 || o.Height < 100 {
		return fmt.Errorf("plot: %dx%d pixels is too small (100x100 at least)", o.Width, o.Height)
	}
	lines := make([]plotter.XYs, len(series)) // nines, milliseconds
	maxNines, maxMs := 2.0, 0.0
	for i, s := range series {
		h := s.Histogram
		n := h.TotalCount()
		if n == 0 {
			return fmt.Errorf("plot: series %q is empty", s.Label)
		}
		last := math.Log10(float64(n)) // the percentile of the last sample, 1 - 1/n
		for _, b := range h.CumulativeDistributionWithTicks(5) {
			q := b.Quantile / 100
			if q >= 1 {
				continue
			}
			x := -math.Log10(1 - q)
			if x > last {
				break
			}
			lines[i] = append(lines[i], plotter.XY{X: x, Y: float64(b.ValueAt) / 1e6})
		}
		lines[i] = append(lines[i], plotter.XY{X: max(last, 0), Y: float64(h.Max()) / 1e6})
		maxNines = max(maxNines, math.Ceil(last))
		maxMs = max(maxMs, float64(h.Max())/1e6)
	}
	maxNines = min(maxNines, 7)

	p := plot.New()
	p.Title.Text = o.Title
	p.Title.TextStyle.Font.Size = vg.Points(16)
	p.X.Label.Text = "percentile"
	p.Y.Label.Text = "latency (ms)"
	p.X.Min, p.X.Max = 0, maxNines
	var xt plot.ConstantTicks
	for k := 0; k <= int(maxNines); k++ {
		xt = append(xt, plot.Tick{Value: float64(k), Label: ninesLabel(k)})
	}
	p.X.Tick.Marker = xt
	var yt plot.ConstantTicks
	if o.LogY {
		// From the decade of the lowest p1: the bottom percent (a clock's
		// microsecond here and there) would stretch the axis for nothing.
		minMs := maxMs
		for _, s := range series {
			minMs = min(minMs, float64(s.Histogram.ValueAtQuantile(1))/1e6)
		}
		lo := math.Floor(math.Log10(max(minMs, 0.001)))
		hi := math.Ceil(math.Log10(max(maxMs, 0.001)))
		if hi <= lo {
			hi = lo + 1
		}
		for d := lo; d <= hi; d++ {
			v := math.Pow(10, d)
			yt = append(yt, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', -1, 64)})
		}
		p.Y.Scale = plot.LogScale{}
		p.Y.Min, p.Y.Max = math.Pow(10, lo), math.Pow(10, hi)
		for _, l := range lines { // a log scale has no 0: clamp to the axis
			for j := range l {
				l[j].Y = max(l[j].Y, p.Y.Min)
			}
		}
	} else {
		step := niceStep(maxMs / 6)
		top := math.Ceil(maxMs/step) * step
		if top <= 0 {
			top, step = 1, 0.2
		}
		for k := 0; float64(k)*step <= top+step/1e6; k++ {
			v := float64(k) * step
			yt = append(yt, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', -1, 64)})
		}
		p.Y.Min, p.Y.Max = 0, top
	}
	p.Y.Tick.Marker = yt
	p.Add(plotter.NewGrid())

	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.XOffs, p.Legend.YOffs = vg.Points(12), -vg.Points(8)
	for i, l := range lines {
		line, err := plotter.NewLine(l)
		if err != nil {
			return fmt.Errorf("plot: series %q: %w", series[i].Label, err)
		}
		line.Color = plotColours[i]
		line.Width = vg.Points(1.5)
		p.Add(line)
		h := series[i].Histogram
		p.Legend.Add(fmt.Sprintf("%s  p50 %s  p99 %s  max %s", series[i].Label, msString(h.ValueAtQuantile(50)), msString(h.ValueAtQuantile(99)), msString(h.Max())), line)
	}

	// Width x Height pixels: the canvas in points at plotDPI dots per inch.
	px := func(n int) vg.Length { return vg.Length(n) * vg.Inch / plotDPI }
	c := vgimg.NewWith(vgimg.UseWH(px(o.Width), px(o.Height)), vgimg.UseDPI(plotDPI), vgimg.UseBackgroundColor(color.White))
	p.Draw(draw.New(c))
	_, err := vgimg.PngCanvas{Canvas: c}.WriteTo(w)
	return err
}

// msString prints nanoseconds as milliseconds with about three significant
// digits ("0.481ms", "24.1ms", "312ms"), or as seconds from 1 s on ("1.21s").
func msString(ns int64) string {
	ms := float64(ns) / 1e6
	switch {
	case ms >= 1000:
		return strconv.FormatFloat(ms/1000, 'f', 2, 64) + "s"
	case ms >= 100:
		return strconv.FormatFloat(ms, 'f', 0, 64) + "ms"
	case ms >= 10:
		return strconv.FormatFloat(ms, 'f', 1, 64) + "ms"
	case ms >= 1:
		return strconv.FormatFloat(ms, 'f', 2, 64) + "ms"
	}
	return strconv.FormatFloat(ms, 'f', 3, 64) + "ms"
}

// ninesLabel names the percentile k nines along: 0%, 90%, 99%, 99.9%, ...
func ninesLabel(k int) string {
	switch k {
	case 0:
		return "0%"
	case 1:
		return "90%"
	}
	s := "99."
	for i := 2; i < k; i++ {
		s += "9"
	}
	if k == 2 {
		s = "99"
	}
	return s + "%"
}

// niceStep rounds x up to 1, 2 or 5 times a power of ten.
func niceStep(x float64) float64 {
	if x <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= x {
			return m * p
		}
	}
	return 10 * p
}
