package benchmark

import (
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"strconv"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
)

// PlotSeries is one line of a percentile plot.
type PlotSeries struct {
	Label string
	// Histogram holds the series' values in nanoseconds (the unit of
	// apogee-bench's interval logs).
	Histogram *hdr.Histogram
}

// PlotOptions shape a plot. The zero value gives a 960x600 image with no
// title.
type PlotOptions struct {
	Title         string
	Width, Height int
	// LogY puts the latency on a logarithmic scale (a grid line per decade),
	// which keeps series of very different magnitudes readable in one plot.
	LogY bool
}

// Colours of the plot: the first four are the frame, the rest the series'
// lines in order.
var plotPalette = color.Palette{
	color.RGBA{255, 255, 255, 255}, // background
	color.RGBA{0, 0, 0, 255},       // axes and text
	color.RGBA{221, 221, 221, 255}, // grid
	color.RGBA{110, 110, 110, 255}, // secondary text
	color.RGBA{31, 119, 180, 255},
	color.RGBA{214, 39, 40, 255},
	color.RGBA{44, 160, 44, 255},
	color.RGBA{255, 127, 14, 255},
	color.RGBA{148, 103, 189, 255},
	color.RGBA{140, 86, 75, 255},
	color.RGBA{227, 119, 194, 255},
	color.RGBA{23, 190, 207, 255},
}

const firstSeriesColour = 4

// PlotPercentiles draws the percentile distribution of each series as
// HdrHistogram's plotter does and writes it to w as a PNG: latency in
// milliseconds up the y axis, the percentile along the x axis on a scale of
// nines (0%, 90%, 99%, 99.9%, ...: each step the next tenth of the tail), so
// the median and the far tail are both readable. A series' last point is
// its maximum, at the percentile of its last sample.
func PlotPercentiles(w io.Writer, series []PlotSeries, o PlotOptions) error {
	if len(series) == 0 {
		return errors.New("plot: no series")
	}
	if len(series) > len(plotPalette)-firstSeriesColour {
		return fmt.Errorf("plot: at most %d series", len(plotPalette)-firstSeriesColour)
	}
	if o.Width == 0 {
		o.Width = 960
	}
	if o.Height == 0 {
		o.Height = 600
	}
	type point struct{ x, y float64 } // nines, milliseconds
	lines := make([][]point, len(series))
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
			lines[i] = append(lines[i], point{x, float64(b.ValueAt) / 1e6})
		}
		lines[i] = append(lines[i], point{max(last, 0), float64(h.Max()) / 1e6})
		maxNines = max(maxNines, math.Ceil(last))
		maxMs = max(maxMs, float64(h.Max())/1e6)
	}
	maxNines = min(maxNines, 7)
	// The y axis: linear from 0 in steps of 1, 2 or 5, or by decades.
	var ticks []float64
	var yPos func(ms float64) float64 // 0 at the bottom, 1 at the top
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
			ticks = append(ticks, math.Pow(10, d))
		}
		yPos = func(ms float64) float64 {
			return (math.Log10(max(ms, math.Pow(10, lo))) - lo) / (hi - lo)
		}
	} else {
		step := niceStep(maxMs / 6)
		top := math.Ceil(maxMs/step) * step
		if top <= 0 {
			top, step = 1, 0.2
		}
		for k := 0; float64(k)*step <= top+step/1e6; k++ {
			ticks = append(ticks, float64(k)*step)
		}
		yPos = func(ms float64) float64 { return ms / top }
	}

	img := image.NewPaletted(image.Rect(0, 0, o.Width, o.Height), plotPalette)
	const left, right, topM, bottom = 96, 60, 70, 78
	pw, ph := o.Width-left-right, o.Height-topM-bottom
	px := func(x float64) int { return left + int(math.Round(x/maxNines*float64(pw))) }
	py := func(y float64) int { return topM + ph - int(math.Round(yPos(y)*float64(ph))) }
	black, grid, grey := plotPalette[1], plotPalette[2], plotPalette[3]

	// Grid, ticks and their labels.
	for _, v := range ticks {
		y := py(v)
		hline(img, left, left+pw, y, grid)
		label := strconv.FormatFloat(v, 'f', -1, 64)
		drawText(img, left-10-textWidth(label, 2), y-7, 2, black, label)
	}
	for k := 0; k <= int(maxNines); k++ {
		x := px(float64(k))
		vline(img, x, topM, topM+ph, grid)
		label := ninesLabel(k)
		drawText(img, x-textWidth(label, 2)/2, topM+ph+10, 2, black, label)
	}
	// Axes.
	hline(img, left, left+pw, topM+ph, black)
	vline(img, left, topM, topM+ph, black)
	drawText(img, left+(pw-textWidth("PERCENTILE", 2))/2, topM+ph+40, 2, black, "percentile")
	drawText(img, 8, topM-26, 2, black, "latency (ms)")
	if o.Title != "" {
		drawText(img, (o.Width-textWidth(o.Title, 3))/2, 14, 3, black, o.Title)
	}

	// The series, then the legend over the grid's top-left corner.
	for i, l := range lines {
		c := plotPalette[firstSeriesColour+i]
		for j := 1; j < len(l); j++ {
			thickLine(img, px(l[j-1].x), py(l[j-1].y), px(l[j].x), py(l[j].y), c)
		}
	}
	lx, ly := left+16, topM+14
	for i, s := range series {
		c := plotPalette[firstSeriesColour+i]
		fillRect(img, lx, ly+2, lx+20, ly+12, c)
		p := percentiles(series[i].Histogram)
		text := fmt.Sprintf("%s  p50 %s  p99 %s  max %s", s.Label, msString(p.P50), msString(p.P99), msString(p.Max))
		drawText(img, lx+28, ly, 2, black, text)
		ly += 22
	}
	drawText(img, o.Width-right-textWidth("apogee-bench", 2), o.Height-22, 2, grey, "apogee-bench")
	return png.Encode(w, img)
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

func hline(img *image.Paletted, x0, x1, y int, c color.Color) {
	for x := x0; x <= x1; x++ {
		img.Set(x, y, c)
	}
}

func vline(img *image.Paletted, x, y0, y1 int, c color.Color) {
	for y := y0; y <= y1; y++ {
		img.Set(x, y, c)
	}
}

func fillRect(img *image.Paletted, x0, y0, x1, y1 int, c color.Color) {
	for y := y0; y < y1; y++ {
		for x := x0; x < x1; x++ {
			img.Set(x, y, c)
		}
	}
}

// thickLine draws a line two pixels wide (Bresenham's, with a 2x2 pen).
func thickLine(img *image.Paletted, x0, y0, x1, y1 int, c color.Color) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := 1, 1
	if x0 > x1 {
		sx = -1
	}
	if y0 > y1 {
		sy = -1
	}
	e := dx + dy
	for {
		fillRect(img, x0, y0, x0+2, y0+2, c)
		if x0 == x1 && y0 == y1 {
			return
		}
		e2 := 2 * e
		if e2 >= dy {
			e += dy
			x0 += sx
		}
		if e2 <= dx {
			e += dx
			y0 += sy
		}
	}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}
