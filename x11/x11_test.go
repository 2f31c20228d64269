package x11

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cubepod/deskd/internal/testenv"
	"github.com/cubepod/deskd/proc"
	"github.com/jezek/xgb"
	"github.com/jezek/xgb/xproto"
)

func TestParseResolution(t *testing.T) {
	tests := []struct {
		in      string
		want    Resolution
		wantErr string
	}{
		{in: "1280x800x24", want: Resolution{1280, 800, 24}},
		{in: "1920x1080", want: Resolution{1920, 1080, 24}},
		{in: "640x480x16", wantErr: "depth must be 24"},
		{in: "640x480x32", wantErr: "depth must be 24"},
		{in: "8192x8192x24", want: Resolution{8192, 8192, 24}},
		{in: "1280x800x8", wantErr: "depth"},
		{in: "8193x800", wantErr: "dimension"},
		{in: "10x10", wantErr: "dimension"},
		{in: "1280", wantErr: "WIDTHxHEIGHT"},
		{in: "1280x", wantErr: "not a number"},
		{in: "+1280x800", wantErr: "not a number"},
		{in: "1280x-800", wantErr: "not a number"},
		{in: "1280x800x24x1", wantErr: "WIDTHxHEIGHT"},
		{in: strings.Repeat("1", 40), wantErr: "too long"},
		{in: "", wantErr: "WIDTHxHEIGHT"},
	}
	for _, tt := range tests {
		got, err := ParseResolution(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseResolution(%q) = %v, %v; want error with %q", tt.in, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseResolution(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

func FuzzParseResolution(f *testing.F) {
	for _, s := range []string{"1280x800x24", "1x1", "x", "99999999999999999999x1", "640x480x16"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseResolution(s)
		if err != nil {
			return
		}
		again, err := ParseResolution(r.String())
		if err != nil || again != r {
			t.Fatalf("%q -> %v -> %v, %v", s, r, again, err)
		}
	})
}

func TestStartXvfb(t *testing.T) {
	path := testenv.LookPath(t, "Xvfb")
	sp := proc.NewSpawner()
	defer sp.Close()
	res := Resolution{1024, 768, 24}
	// Two at once: -displayfd must give them different displays.
	var wg sync.WaitGroup
	xs := make([]*Xvfb, 2)
	errs := make([]error, 2)
	for i := range xs {
		wg.Go(func() {
			xs[i], errs[i] = StartXvfb(t.Context(), sp, XvfbConfig{Path: path, Resolution: res})
		})
	}
	wg.Wait()
	for i, x := range xs {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		defer x.Stop(context.Background(), 5*time.Second)
	}
	if xs[0].Display == xs[1].Display {
		t.Fatalf("both servers on %s", xs[0].Display)
	}
	c, err := xgb.NewConnDisplay(xs[0].Display)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	scr := xproto.Setup(c).DefaultScreen(c)
	if int(scr.WidthInPixels) != res.Width || int(scr.HeightInPixels) != res.Height || int(scr.RootDepth) != res.Depth {
		t.Fatalf("screen %dx%dx%d, want %v", scr.WidthInPixels, scr.HeightInPixels, scr.RootDepth, res)
	}
}

func TestStartXvfbFailsClearly(t *testing.T) {
	sp := proc.NewSpawner()
	defer sp.Close()
	// /bin/false exits at once without writing a display number.
	_, err := StartXvfb(t.Context(), sp, XvfbConfig{Path: "/bin/false", Resolution: Resolution{640, 480, 24}})
	if err == nil || !strings.Contains(err.Error(), "exit status 1") {
		t.Fatalf("err = %v; want the exit status", err)
	}
}
