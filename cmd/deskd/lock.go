package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
)

// openLock opens (or makes) a lock file, never through a link.
func openLock(path string) (*os.File, error) {
	return openNoFollow(path, os.O_CREATE|os.O_RDWR)
}

// openNoFollow opens path with flag (and O_CREATE's mode 0644), never
// through a symbolic link: one found at its name (planted there) is
// removed and the open tried again.
func openNoFollow(path string, flag int) (*os.File, error) {
	f, err := os.OpenFile(path, flag|syscall.O_NOFOLLOW, 0o644)
	if errors.Is(err, syscall.ELOOP) {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		f, err = os.OpenFile(path, flag|syscall.O_NOFOLLOW, 0o644)
	}
	return f, err
}

// tryLock takes an exclusive flock on path without waiting.
func tryLock(path string) (*os.File, error) {
	f, err := openLock(path)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return f, nil
}

// lock takes an exclusive flock on path, waiting until ctx ends. The
// waiting flock call runs in its own goroutine; if ctx ends first, that
// goroutine is left to finish when the lock frees (and releases it), which
// is harmless for a CLI process that then exits.
func lock(ctx context.Context, path string) (*os.File, error) {
	f, err := openLock(path)
	if err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- syscall.Flock(int(f.Fd()), syscall.LOCK_EX) }()
	select {
	case err := <-done:
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		return f, nil
	case <-ctx.Done():
		go func() { <-done; f.Close() }()
		return nil, fmt.Errorf("lock %s: %w", path, ctx.Err())
	}
}

// writeFileNoFollow writes data to path, replacing what is there, and
// never through a symbolic link.
func writeFileNoFollow(path string, data []byte, perm os.FileMode) error {
	f, err := openNoFollow(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC)
	if err == nil {
		err = f.Chmod(perm)
	}
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
