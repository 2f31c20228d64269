package web

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"
)

// The files API, confined to the GUI user's home (Config.FilesRoot):
//
//	GET    /files/<dir>/    JSON listing (a directory's path may end in "/" or not)
//	GET    /files/<file>    the file, as a download (ranges supported)
//	PUT    /files/<file>    streamed to a temporary file beside it, then renamed
//	                        into place; "If-None-Match: *" refuses to replace (412)
//	PUT    /files/<dir>/    makes the directory (and its parents)
//	DELETE /files/<path>    removes a file or an empty directory
//
// Every name goes through os.Root, so neither ".." nor a symbolic link
// leads out of the home; what is made belongs to the GUI user. A view
// token may list and download only, and only under ~/Downloads (where
// uploads and Chromium's downloads land): the rest of the home holds the
// user's keys, tokens and shell history.
const (
	// maxFilePath bounds a path under /files/, maxFileName one name in it
	// (Linux's NAME_MAX).
	maxFilePath = 4096
	maxFileName = 255
	// maxListing bounds the entries of one directory listing.
	maxListing = 10000
	// uploadBuffer is the copy buffer of an upload: memory per upload.
	uploadBuffer = 256 << 10
	// uploadPrefix names an upload in progress (hidden, unique).
	uploadPrefix = ".deskd-upload-"
)

// errBadPath is a path the files API refuses to interpret.
var errBadPath = errors.New("bad path")

// FilePath checks a path under /files/ (without that prefix) and returns
// it as an os.Root name ("." for the home itself) and whether it names a
// directory (a trailing "/"). Names are UTF-8 without control characters,
// "." or ".." components, or empty components.
func FilePath(p string) (name string, dir bool, err error) {
	if len(p) > maxFilePath {
		return "", false, fmt.Errorf("%w: %d bytes (max %d)", errBadPath, len(p), maxFilePath)
	}
	if !utf8.ValidString(p) {
		return "", false, fmt.Errorf("%w: not UTF-8", errBadPath)
	}
	if p == "" {
		return ".", true, nil
	}
	if strings.HasPrefix(p, "/") {
		return "", false, fmt.Errorf("%w: %q is absolute", errBadPath, p)
	}
	dir = strings.HasSuffix(p, "/")
	p = strings.TrimSuffix(p, "/")
	for _, c := range strings.Split(p, "/") {
		switch {
		case c == "":
			return "", false, fmt.Errorf("%w: empty name in %q", errBadPath, p)
		case c == "." || c == "..":
			return "", false, fmt.Errorf("%w: %q holds %q", errBadPath, p, c)
		case len(c) > maxFileName:
			return "", false, fmt.Errorf("%w: a name of %d bytes (max %d)", errBadPath, len(c), maxFileName)
		}
		for _, r := range c {
			if r < 0x20 || r == 0x7f {
				return "", false, fmt.Errorf("%w: %q holds a control character", errBadPath, p)
			}
		}
	}
	return p, dir, nil
}

// fileEntry is one entry of a listing.
type fileEntry struct {
	Name  string    `json:"name"`
	Type  string    `json:"type"` // file, dir, symlink or other
	Size  int64     `json:"size"`
	MTime time.Time `json:"mtime"`
}

type fileListing struct {
	Path      string      `json:"path"`
	Entries   []fileEntry `json:"entries"`
	Truncated bool        `json:"truncated,omitempty"`
}

// isFilesPath reports whether a request is for the files API. Such
// requests skip the ServeMux, whose path cleaning would answer ".." or
// "//" with a redirect out of the panel instead of a clear 400.
func isFilesPath(p string) bool { return p == "/files" || strings.HasPrefix(p, "/files/") }

// filesAPI dispatches by method: GET and HEAD for any token, PUT and
// DELETE for full ones.
func (s *Server) filesAPI(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		s.files(w, r)
	case http.MethodPut, http.MethodDelete:
		s.requireFull(s.files)(w, r)
	default:
		w.Header().Set("Allow", "GET, HEAD, PUT, DELETE")
		writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "the files API takes GET, HEAD, PUT and DELETE"})
	}
}

func (s *Server) files(w http.ResponseWriter, r *http.Request) {
	if s.cfg.FilesRoot == "" {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "no files root configured"})
		return
	}
	name, dir, err := FilePath(strings.TrimPrefix(strings.TrimPrefix(r.URL.Path, "/files"), "/"))
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	if _, err := os.Stat(s.cfg.FilesRoot); errors.Is(err, fs.ErrNotExist) && r.Method == http.MethodPut {
		// A home made here (before the desktop ever ran) is the GUI
		// user's, as the desktop would have made it.
		if err := os.MkdirAll(s.cfg.FilesRoot, 0o700); err != nil {
			s.fileError(w, r, err)
			return
		}
		if err := s.own(func(uid, gid int) error { return os.Chown(s.cfg.FilesRoot, uid, gid) }); err != nil {
			s.fileError(w, r, err)
			return
		}
	}
	root, err := os.OpenRoot(s.cfg.FilesRoot)
	if err != nil {
		s.fileError(w, r, err)
		return
	}
	defer root.Close()
	if s.denied(name) {
		writeJSON(w, http.StatusForbidden, map[string]string{"error": name + " is not shared through the files API"})
		return
	}
	only := ""
	if c, _ := ClaimsFrom(r.Context()); c.ReadOnly() {
		if name != viewDir && !strings.HasPrefix(name, viewDir+"/") {
			writeJSON(w, http.StatusForbidden, map[string]string{"error": "a view-only link reads ~/" + viewDir + " only"})
			return
		}
		// Downloads itself must be a directory, not a link to another
		// part of the home; what is opened under it must stay in it.
		if fi, err := root.Lstat(viewDir); err != nil || !fi.IsDir() {
			writeJSON(w, http.StatusNotFound, map[string]string{"error": "no ~/" + viewDir})
			return
		}
		home, err := filepath.EvalSymlinks(s.cfg.FilesRoot)
		if err != nil {
			s.fileError(w, r, err)
			return
		}
		only = filepath.Join(home, viewDir)
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		s.fileGet(w, r, root, name, only)
	case http.MethodPut:
		if dir {
			if err := s.mkdirAll(root, name); err != nil {
				s.fileError(w, r, err)
				return
			}
			writeJSON(w, http.StatusCreated, map[string]string{"path": name + "/"})
			return
		}
		s.filePut(w, r, root, name)
	case http.MethodDelete:
		if name == "." {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "the home itself cannot be removed"})
			return
		}
		if err := root.Remove(name); err != nil {
			s.fileError(w, r, err)
			return
		}
		s.log.Info("file removed", "path", name)
		w.WriteHeader(http.StatusNoContent)
	}
}

// viewDir is the one part of the home a view token may read.
const viewDir = "Downloads"

// fileGet serves name; only, when set, is the directory the opened file
// must really be in (links resolved).
func (s *Server) fileGet(w http.ResponseWriter, r *http.Request, root *os.Root, name, only string) {
	// O_NONBLOCK: a FIFO planted in the home must not hang the request
	// between this open and the check that it is a regular file.
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		s.fileError(w, r, err)
		return
	}
	defer f.Close()
	// Where the open file really is, symbolic links resolved by the
	// kernel: a link inside the home to a denied path is denied too.
	real, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(f.Fd())))
	if err != nil || s.deniedPath(real) || (only != "" && !pathUnder(real, only)) {
		writeJSON(w, http.StatusForbidden, map[string]string{"error": name + " is not shared through the files API"})
		return
	}
	fi, err := f.Stat()
	if err != nil {
		s.fileError(w, r, err)
		return
	}
	if fi.IsDir() {
		s.fileList(w, r, f, name, real)
		return
	}
	if !fi.Mode().IsRegular() {
		writeJSON(w, http.StatusForbidden, map[string]string{"error": "not a regular file: " + name})
		return
	}
	// Always a download: a page from the home shown inline would run
	// with the panel's origin (and its token).
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": path.Base(name)}))
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "sandbox")
	h.Set("Cache-Control", "no-store")
	s.logAction("file", map[string]any{"op": "download", "path": name, "bytes": fi.Size()})
	http.ServeContent(w, r, "", fi.ModTime(), f)
}

func (s *Server) fileList(w http.ResponseWriter, r *http.Request, f *os.File, name, real string) {
	ents, err := f.ReadDir(maxListing + 1)
	if err != nil && !errors.Is(err, io.EOF) {
		s.fileError(w, r, err)
		return
	}
	out := fileListing{Path: strings.TrimPrefix(name+"/", "./"), Entries: []fileEntry{}}
	if len(ents) > maxListing {
		ents, out.Truncated = ents[:maxListing], true
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), uploadPrefix) || s.deniedPath(filepath.Join(real, e.Name())) {
			continue // an upload in progress, or not shared
		}
		fe := fileEntry{Name: e.Name(), Type: "other"}
		switch t := e.Type(); {
		case t.IsDir():
			fe.Type = "dir"
		case t.IsRegular():
			fe.Type = "file"
		case t&fs.ModeSymlink != 0:
			fe.Type = "symlink"
		}
		if fi, err := e.Info(); err == nil {
			fe.Size, fe.MTime = fi.Size(), fi.ModTime().UTC().Truncate(time.Second)
		}
		out.Entries = append(out.Entries, fe)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) filePut(w http.ResponseWriter, r *http.Request, root *os.Root, name string) {
	max := s.cfg.MaxUpload
	if r.ContentLength > max {
		writeJSON(w, http.StatusRequestEntityTooLarge, map[string]string{"error": fmt.Sprintf("file of %d bytes (max %d)", r.ContentLength, max)})
		return
	}
	exclusive := r.Header.Get("If-None-Match") == "*"
	if exclusive {
		if _, err := root.Lstat(name); err == nil {
			writeJSON(w, http.StatusPreconditionFailed, map[string]string{"error": name + " exists"})
			return
		}
	}
	parent := path.Dir(name)
	if err := s.mkdirAll(root, parent); err != nil {
		s.fileError(w, r, err)
		return
	}
	var rnd [8]byte
	rand.Read(rnd[:])
	tmp := path.Join(parent, uploadPrefix+hex.EncodeToString(rnd[:]))
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		s.fileError(w, r, err)
		return
	}
	done := false
	defer func() {
		if !done {
			f.Close()
			_ = root.Remove(tmp)
		}
	}()
	if err := s.own(f.Chown); err != nil {
		s.fileError(w, r, err)
		return
	}
	n, err := io.CopyBuffer(onlyWriter{f}, http.MaxBytesReader(w, r.Body, max), make([]byte, uploadBuffer))
	if err != nil {
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			writeJSON(w, http.StatusRequestEntityTooLarge, map[string]string{"error": fmt.Sprintf("file over %d bytes", max)})
			return
		}
		s.fileError(w, r, err)
		return
	}
	if r.ContentLength >= 0 && n != r.ContentLength {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("got %d of %d bytes", n, r.ContentLength)})
		return
	}
	if err := f.Close(); err != nil {
		s.fileError(w, r, err)
		return
	}
	if exclusive {
		// A link fails if the name exists, whatever appeared meanwhile.
		err = root.Link(tmp, name)
		if err == nil {
			_ = root.Remove(tmp)
		} else if errors.Is(err, fs.ErrExist) {
			done = true
			_ = root.Remove(tmp)
			writeJSON(w, http.StatusPreconditionFailed, map[string]string{"error": name + " exists"})
			return
		}
	} else {
		err = root.Rename(tmp, name)
	}
	if err != nil {
		s.fileError(w, r, err)
		return
	}
	done = true
	s.log.Info("file uploaded", "path", name, "bytes", n)
	s.logAction("file", map[string]any{"op": "upload", "path": name, "bytes": n})
	writeJSON(w, http.StatusCreated, fileEntry{Name: name, Type: "file", Size: n, MTime: time.Now().UTC().Truncate(time.Second)})
}

// denied reports whether name, or the place a symbolic link on its way
// leads to, is one of FilesDeny or below one.
func (s *Server) denied(name string) bool {
	if len(s.cfg.FilesDeny) == 0 {
		return false
	}
	p := filepath.Join(s.cfg.FilesRoot, name)
	if s.deniedPath(p) {
		return true
	}
	// Resolve what exists of the path (a link to the profile, say).
	for q := p; ; q = filepath.Dir(q) {
		if real, err := filepath.EvalSymlinks(q); err == nil {
			return s.deniedPath(filepath.Join(real, strings.TrimPrefix(p, q)))
		}
		if q == s.cfg.FilesRoot || q == filepath.Dir(q) {
			return false
		}
	}
}

// deniedPath reports whether the absolute path p is a denied path or
// below one.
func (s *Server) deniedPath(p string) bool {
	for _, d := range s.cfg.FilesDeny {
		if d == "" {
			continue
		}
		// Both spellings: as configured, and resolved now (the profile
		// may not have existed when deskd started).
		if pathUnder(p, filepath.Clean(d)) {
			return true
		}
		if real, err := filepath.EvalSymlinks(d); err == nil && pathUnder(p, real) {
			return true
		}
	}
	return false
}

// onlyWriter hides *os.File's ReadFrom, so the copy goes through the
// bounded buffer (ReadFrom would splice or fall back to its own buffers).
type onlyWriter struct{ io.Writer }

// mkdirAll makes dir and its missing parents, each owned by the GUI user.
func (s *Server) mkdirAll(root *os.Root, dir string) error {
	if dir == "." {
		return nil
	}
	cur := ""
	for _, c := range strings.Split(dir, "/") {
		cur = path.Join(cur, c)
		err := root.Mkdir(cur, 0o755)
		if errors.Is(err, fs.ErrExist) {
			if fi, err := root.Stat(cur); err != nil {
				return err
			} else if !fi.IsDir() {
				return &fs.PathError{Op: "mkdir", Path: cur, Err: syscall.ENOTDIR}
			}
			continue
		}
		if err != nil {
			return err
		}
		if err := s.own(func(uid, gid int) error { return root.Lchown(cur, uid, gid) }); err != nil {
			return err
		}
	}
	return nil
}

// own hands what deskd made to the GUI user, when deskd runs as root for
// another user.
func (s *Server) own(chown func(uid, gid int) error) error {
	c := s.cfg.FilesOwner
	if c == nil || os.Geteuid() != 0 || int(c.Uid) == os.Geteuid() {
		return nil
	}
	return chown(int(c.Uid), int(c.Gid))
}

// fileError answers a file system error with the status that says what
// went wrong, without the home's own path.
func (s *Server) fileError(w http.ResponseWriter, r *http.Request, err error) {
	code := http.StatusInternalServerError
	var errno syscall.Errno
	switch {
	case errors.Is(err, fs.ErrNotExist):
		code = http.StatusNotFound
	case errors.Is(err, fs.ErrPermission):
		code = http.StatusForbidden
	case errors.Is(err, fs.ErrExist), errors.As(err, &errno) && (errno == syscall.ENOTEMPTY || errno == syscall.EISDIR || errno == syscall.ENOTDIR):
		code = http.StatusConflict
	case errors.As(err, &errno) && (errno == syscall.ENOSPC || errno == syscall.EDQUOT):
		code = http.StatusInsufficientStorage
	case strings.Contains(err.Error(), "escapes from parent"), errors.As(err, &errno) && errno == syscall.ELOOP:
		code = http.StatusForbidden
	}
	msg := err.Error()
	if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
		msg = pe.Op + " " + pe.Path + ": " + pe.Err.Error()
	}
	if le := (*os.LinkError)(nil); errors.As(err, &le) {
		msg = le.Op + ": " + le.Err.Error()
	}
	if code == http.StatusInternalServerError {
		s.log.Error("files", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	writeJSON(w, code, map[string]string{"error": msg, "status": strconv.Itoa(code)})
}

// pathUnder reports whether the clean path p is dir or inside it.
func pathUnder(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}
