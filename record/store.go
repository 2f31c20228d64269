// Package record keeps recordings of what happened in the sandbox: a
// terminal session as an asciicast v2 file (this package's Cast), the
// desktop as what a viewer is sent (DesktopRecorder), what agents and
// people did (Actions), in one directory bounded in bytes and age. A recording never disturbs what it
// records: a write that fails (a full disk, the quota) stops the
// recording, logged, and the session goes on.
package record

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Kinds of recording and their file extensions.
const (
	Terminal  = "terminal" // asciicast v2
	ActionLog = "actions"  // JSONL (Actions)
	Desktop   = "desktop"  // what an RFB viewer is sent (DesktopRecorder)
)

var extOf = map[string]string{Terminal: ".cast", ActionLog: ".jsonl", Desktop: ".deskrec"}

// Info describes a recording.
type Info struct {
	ID       string    `json:"id"`
	Kind     string    `json:"kind"`
	Size     int64     `json:"size"`
	Modified time.Time `json:"modified"`
	// Active: still being written (it plays up to its last write).
	Active bool `json:"active"`
	// Stopped says why an active recording stopped early, if it did.
	Stopped string `json:"stopped,omitempty"`
}

// Store is a directory of recordings. Its methods are safe for
// concurrent use.
type Store struct {
	root     *os.Root
	maxBytes int64
	maxAge   time.Duration
	log      *slog.Logger

	written atomic.Int64 // bytes written since Open

	mu     sync.Mutex
	used   int64            // bytes of every recording in the directory
	active map[string]*File // being written
}

// Defaults of Open's bounds.
const (
	DefaultMaxBytes = 1 << 30
	DefaultMaxAge   = 7 * 24 * time.Hour
)

// Open opens (creating it, 0700) the directory of recordings. maxBytes
// bounds them all together; maxAge the age of finished ones (0: the
// defaults).
func Open(dir string, maxBytes int64, maxAge time.Duration, log *slog.Logger) (*Store, error) {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	if maxAge <= 0 {
		maxAge = DefaultMaxAge
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("record: %w", err)
	}
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("record: %s is not a directory", dir)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("record: %w", err)
	}
	s := &Store{root: root, maxBytes: maxBytes, maxAge: maxAge, log: log, active: map[string]*File{}}
	infos, err := s.scan()
	if err != nil {
		root.Close()
		return nil, err
	}
	for _, i := range infos {
		s.used += i.Size
	}
	return s, nil
}

// Close closes the recordings still being written, then the directory.
func (s *Store) Close() error {
	s.mu.Lock()
	files := make([]*File, 0, len(s.active))
	for _, f := range s.active {
		files = append(files, f)
	}
	s.mu.Unlock()
	for _, f := range files {
		f.Close()
	}
	return s.root.Close()
}

// MaxID bounds a recording id.
const MaxID = 64

// CheckID accepts the ids Create makes: KIND-YYYYMMDDTHHMMSSZ-8 hex digits.
func CheckID(id string) error {
	bad := fmt.Errorf("recording id %.40q: want one from the list, such as terminal-20261207T120000Z-0a1b2c3d", id)
	kind, rest, ok := strings.Cut(id, "-")
	if !ok || len(id) > MaxID || extOf[kind] == "" || len(rest) != 16+1+8 || rest[8] != 'T' || rest[15] != 'Z' || rest[16] != '-' {
		return bad
	}
	for i, c := range rest {
		switch {
		case i == 8 || i == 15 || i == 16:
		case i < 15 && c >= '0' && c <= '9':
		case i > 16 && (c >= '0' && c <= '9' || c >= 'a' && c <= 'f'):
		default:
			return bad
		}
	}
	return nil
}

// ErrNotFound, ErrActive: what Get and Remove may answer.
var (
	ErrNotFound = errors.New("no such recording")
	ErrActive   = errors.New("the recording is still being written: stop it first")
	ErrQuota    = errors.New("the recordings' space is used up")
)

func kindOf(id string) string { k, _, _ := strings.Cut(id, "-"); return k }

// FileName is the file name a recording downloads as, and its media type.
func FileName(id string) (name, mediaType string) {
	switch kindOf(id) {
	case ActionLog:
		return id + extOf[ActionLog], "application/x-ndjson"
	case Desktop:
		return id + extOf[Desktop], "application/octet-stream"
	}
	return id + extOf[kindOf(id)], "application/x-asciicast"
}

// scan lists the directory's recordings (what is not one is ignored).
func (s *Store) scan() ([]Info, error) {
	ents, err := fs.ReadDir(s.root.FS(), ".")
	if err != nil {
		return nil, fmt.Errorf("record: %w", err)
	}
	var out []Info
	for _, e := range ents {
		id, ext, _ := strings.Cut(e.Name(), ".")
		if CheckID(id) != nil || "."+ext != extOf[kindOf(id)] || !e.Type().IsRegular() {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue
		}
		out = append(out, Info{ID: id, Kind: kindOf(id), Size: fi.Size(), Modified: fi.ModTime()})
	}
	return out, nil
}

// List returns the recordings, newest first, after dropping those past
// the age bound.
func (s *Store) List() ([]Info, error) {
	s.prune(0)
	infos, err := s.scan()
	if err != nil {
		return nil, err
	}
	// Lock order: a File's lock, then the Store's (Write, Close); so the
	// active files are taken under s.mu and asked after.
	s.mu.Lock()
	active := make(map[string]*File, len(s.active))
	for id, f := range s.active {
		active[id] = f
	}
	s.mu.Unlock()
	for i := range infos {
		if f := active[infos[i].ID]; f != nil {
			infos[i].Active, infos[i].Stopped = true, f.stopped()
		}
	}
	slices.SortFunc(infos, func(a, b Info) int { return strings.Compare(b.ID[len(b.Kind):], a.ID[len(a.Kind):]) })
	return infos, nil
}

// Get opens recording id for reading.
func (s *Store) Get(id string) (*os.File, Info, error) {
	if err := CheckID(id); err != nil {
		return nil, Info{}, err
	}
	f, err := s.root.OpenFile(id+extOf[kindOf(id)], os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, Info{}, ErrNotFound
	}
	if err != nil {
		return nil, Info{}, fmt.Errorf("record: %w", err)
	}
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, Info{}, ErrNotFound
	}
	s.mu.Lock()
	active := s.active[id] != nil
	s.mu.Unlock()
	return f, Info{ID: id, Kind: kindOf(id), Size: fi.Size(), Modified: fi.ModTime(), Active: active}, nil
}

// Remove deletes a finished recording.
func (s *Store) Remove(id string) error {
	if err := CheckID(id); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.active[id] != nil {
		return ErrActive
	}
	return s.removeLocked(id)
}

func (s *Store) removeLocked(id string) error {
	name := id + extOf[kindOf(id)]
	fi, err := s.root.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("record: %w", err)
	}
	if err := s.root.Remove(name); err != nil {
		return fmt.Errorf("record: %w", err)
	}
	s.used = max(0, s.used-fi.Size())
	return nil
}

// prune drops finished recordings past the age bound, then the oldest
// finished ones until need more bytes fit; it reports whether they do.
func (s *Store) prune(need int64) bool {
	infos, err := s.scan()
	if err != nil {
		return false
	}
	slices.SortFunc(infos, func(a, b Info) int { return a.Modified.Compare(b.Modified) })
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	for _, i := range infos {
		if s.active[i.ID] != nil {
			continue
		}
		if now.Sub(i.Modified) > s.maxAge || s.used+need > s.maxBytes {
			if s.removeLocked(i.ID) == nil {
				s.log.Info("recording dropped", "id", i.ID, "size", i.Size, "why", map[bool]string{true: "age", false: "space"}[now.Sub(i.Modified) > s.maxAge])
			}
		}
	}
	return s.used+need <= s.maxBytes
}

// Create starts a new recording of kind.
func (s *Store) Create(kind string) (*File, error) {
	ext := extOf[kind]
	if ext == "" {
		return nil, fmt.Errorf("record: unknown kind %q", kind)
	}
	if !s.prune(4096) {
		return nil, ErrQuota
	}
	var rnd [4]byte
	rand.Read(rnd[:])
	id := kind + "-" + time.Now().UTC().Format("20060102T150405Z") + "-" + hex.EncodeToString(rnd[:])
	f, err := s.root.OpenFile(id+ext, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("record: %w", err)
	}
	rf := &File{ID: id, s: s, f: f}
	s.mu.Lock()
	s.active[id] = rf
	s.mu.Unlock()
	return rf, nil
}

// Written is how many bytes recordings wrote since Open.
func (s *Store) Written() int64 { return s.written.Load() }

// MaxBytes is the bound of all recordings together.
func (s *Store) MaxBytes() int64 { return s.maxBytes }

// Active is how many recordings are being written.
func (s *Store) Active() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.active)
}

// Bytes is the space the recordings take.
func (s *Store) Bytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.used
}

// File is a recording being written. Writes go straight to the file (a
// crash leaves what was written); the first failure stops it.
type File struct {
	ID string
	s  *Store

	mu   sync.Mutex
	f    *os.File
	why  string // why it stopped early
	done bool
}

var _ io.WriteCloser = (*File)(nil)

// Write appends p, within the store's bounds. After a failure it drops
// everything and says why.
func (f *File) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done || f.why != "" {
		return 0, fmt.Errorf("record: %s stopped: %s", f.ID, cmpOr(f.why, "closed"))
	}
	s := f.s
	s.mu.Lock()
	fits := s.used+int64(len(p)) <= s.maxBytes
	s.mu.Unlock()
	if !fits && !s.prune(int64(len(p))) {
		f.stop(ErrQuota.Error())
		return 0, ErrQuota
	}
	n, err := f.f.Write(p)
	s.written.Add(int64(n))
	s.mu.Lock()
	s.used += int64(n)
	s.mu.Unlock()
	if err != nil {
		f.stop(err.Error())
		return n, err
	}
	return n, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// stop ends a recording that failed; callers hold f.mu.
func (f *File) stop(why string) {
	f.why = why
	f.s.log.Warn("recording stopped", "id", f.ID, "why", why)
}

func (f *File) stopped() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.why
}

// Close finishes the recording.
func (f *File) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done {
		return nil
	}
	f.done = true
	err := f.f.Close()
	f.s.mu.Lock()
	delete(f.s.active, f.ID)
	f.s.mu.Unlock()
	return err
}
