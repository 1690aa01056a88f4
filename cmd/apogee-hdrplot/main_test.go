package main

import (
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// build compiles the command into a temporary directory.
func build(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "apogee-hdrplot")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// readPNG decodes the PNG at path, checks its size, and that it is not
// blank: most of it is the white background, but the frame, the text and
// the series cover part of it in several colours.
func readPNG(t *testing.T, path string, w, h int) image.Image {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s is not a PNG: %v", path, err)
	}
	if r := img.Bounds(); r.Dx() != w || r.Dy() != h {
		t.Fatalf("%s is %dx%d, want %dx%d", path, r.Dx(), r.Dy(), w, h)
	}
	colours := map[[3]uint32]int{}
	inked := 0
	for y := img.Bounds().Min.Y; y < img.Bounds().Max.Y; y++ {
		for x := img.Bounds().Min.X; x < img.Bounds().Max.X; x++ {
			r, g, b, _ := img.At(x, y).RGBA()
			colours[[3]uint32{r >> 8, g >> 8, b >> 8}]++
			if r>>8 < 200 || g>>8 < 200 || b>>8 < 200 {
				inked++
			}
		}
	}
	if inked < w*h/200 || len(colours) < 4 {
		t.Fatalf("%s looks blank: %d of %d pixels inked, %d colours", path, inked, w*h, len(colours))
	}
	return img
}

// seriesPixels counts the pixels of img drawn in c (the series' colours are
// drawn antialiased: their core pixels are exactly c). A series may lie
// under a later one (send and delay nearly coincide at a fixed rate), so
// its legend swatch alone may be what shows.
func seriesPixels(img image.Image, c [3]uint32) int {
	n := 0
	for y := img.Bounds().Min.Y; y < img.Bounds().Max.Y; y++ {
		for x := img.Bounds().Min.X; x < img.Bounds().Max.X; x++ {
			r, g, b, _ := img.At(x, y).RGBA()
			if [3]uint32{r >> 8, g >> 8, b >> 8} == c {
				n++
			}
		}
	}
	return n
}

// TestPlotsFromFixtureLogs runs the command on two interval logs apogee-bench
// wrote (testdata: a store run at a fixed rate and one closed loop) the way
// docs/bench.md does, and checks each PNG: its size, that it is not blank,
// and that each series' colour is drawn. No pixel-exact comparison: the
// rasterization is the plotting library's.
func TestPlotsFromFixtureLogs(t *testing.T) {
	bin := build(t)
	dir := t.TempDir()
	fixed, closed := filepath.Join("testdata", "store-20000.hlog"), filepath.Join("testdata", "store-closed.hlog")
	colour := func(i int) [3]uint32 {
		r, g, b, _ := plotColours[i].RGBA()
		return [3]uint32{r >> 8, g >> 8, b >> 8}
	}

	// One log, three series, linear scale, with the .hgrm text.
	one := filepath.Join(dir, "run.png")
	out, err := exec.Command(bin, "-o", one, "--title", "store at 20000 msgs/s", "--tags", "send,e2e,delay", "--percentiles", fixed).Output()
	if err != nil {
		t.Fatalf("apogee-hdrplot: %v\n%s", err, out)
	}
	for _, want := range []string{"# send (values in ms)", "# e2e (values in ms)", "# delay (values in ms)", "Value\tPercentile\tTotalCount\t1/(1-Percentile)", "#[Max     ="} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("--percentiles output lacks %q:\n%s", want, out)
		}
	}
	img := readPNG(t, one, 960, 600)
	for i := range 3 {
		if n := seriesPixels(img, colour(i)); n < 20 {
			t.Errorf("run.png: series %d drawn with %d pixels", i, n)
		}
	}

	// Two logs compared on a log scale, at another size.
	two := filepath.Join(dir, "compare.png")
	if out, err := exec.Command(bin, "-o", two, "--log-y", "--tags", "e2e", "--labels", "fixed 20000/s,closed loop",
		"--width", "800", "--height", "500", fixed, closed).CombinedOutput(); err != nil {
		t.Fatalf("two logs: %v\n%s", err, out)
	}
	img = readPNG(t, two, 800, 500)
	for i := range 2 {
		if n := seriesPixels(img, colour(i)); n < 20 {
			t.Errorf("compare.png: series %d drawn with %d pixels", i, n)
		}
	}

	// The default output name.
	cmd := exec.Command(bin, filepath.Join(mustAbs(t, fixed)))
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("default output: %v\n%s", err, out)
	}
	readPNG(t, filepath.Join(dir, "latency.png"), 960, 600)

	// A tag no log has, and --labels of the wrong length, are errors.
	if err := exec.Command(bin, "-o", one, "--tags", "nope", fixed).Run(); err == nil {
		t.Fatal("a missing tag was accepted")
	}
	if err := exec.Command(bin, "-o", one, "--labels", "a", fixed, closed).Run(); err == nil {
		t.Fatal("one label for two logs was accepted")
	}
	if out, err := exec.Command(bin, "--version").Output(); err != nil || !strings.HasPrefix(string(out), "apogee-hdrplot ") {
		t.Fatalf("--version: %v %q", err, out)
	}
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestMsString(t *testing.T) {
	for ns, want := range map[int64]string{481_000: "0.481ms", 2_523_000: "2.52ms", 24_100_000: "24.1ms", 312_400_000: "312ms", 1_210_000_000: "1.21s"} {
		if got := msString(ns); got != want {
			t.Errorf("msString(%d) = %q, want %q", ns, got, want)
		}
	}
}

func TestNinesLabelsAndSteps(t *testing.T) {
	var got []string
	for k := range 6 {
		got = append(got, ninesLabel(k))
	}
	if strings.Join(got, " ") != "0% 90% 99% 99.9% 99.99% 99.999%" {
		t.Fatalf("labels %q", got)
	}
	for x, want := range map[float64]float64{0.3: 0.5, 7: 10, 12: 20, 0.04: 0.05, 100: 100} {
		if got := niceStep(x); strconv.FormatFloat(got, 'g', -1, 64) != strconv.FormatFloat(want, 'g', -1, 64) {
			t.Errorf("niceStep(%v) = %v, want %v", x, got, want)
		}
	}
}
