package web

import (
	"embed"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
)

// static holds our pages; static/vendor/ is filled from the pinned npm
// packages by `make assets` (it is not committed).
//
//go:embed all:static
var static embed.FS

// vendorMissing reports whether the build lacks the npm assets.
func vendorMissing() bool {
	_, err := fs.Stat(static, "static/vendor/novnc/core/rfb.js")
	return err != nil
}

func assetHandler(log *slog.Logger) http.Handler {
	if vendorMissing() {
		log.Warn("web assets were not built into this binary: run `make assets` before `go build`")
	}
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // static is a literal directory of this package
	}
	files := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer") // keep tokens in paths out of Referer
		if strings.HasPrefix(r.URL.Path, "/vendor/") {
			// Pinned versions: safe to cache for a day.
			h.Set("Cache-Control", "public, max-age=86400")
		} else {
			h.Set("Cache-Control", "no-cache")
		}
		// No X-Frame-Options: the panel is meant to be framed.
		files.ServeHTTP(w, r)
	})
}
