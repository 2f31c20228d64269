package main

import (
	"context"
	"fmt"
	"os"
	"syscall"
)

// tryLock takes an exclusive flock on path without waiting.
func tryLock(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
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
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
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
