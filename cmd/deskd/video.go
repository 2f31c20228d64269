package main

import (
	"log/slog"
	"path/filepath"
	"syscall"
	"time"

	"github.com/cubepod/deskd/bridge"
	"github.com/cubepod/deskd/h264enc"
	"github.com/cubepod/deskd/proc"
	"github.com/cubepod/deskd/record"
)

// videoEncoders is the RFB server's H.264 encoder factory: x264 children
// run as the GUI user, their output in the run dir's logs; nil when
// --h264=off or no x264 is installed (encoding 50 is then never sent).
func videoEncoders(cfg *Config, sp *proc.Spawner, cred *syscall.Credential, log *slog.Logger) func(w, h, quality int) (bridge.VideoEncoder, error) {
	if cfg.H264 == "off" {
		return nil
	}
	x264, stdbuf, err := h264enc.Find(cfg.X264)
	if err != nil {
		log.Info("H.264 not offered", "reason", err)
		return nil
	}
	log.Info("H.264 offered to viewers that take it", "x264", x264)
	return func(w, h, quality int) (bridge.VideoEncoder, error) {
		return h264enc.Start(h264enc.Config{
			X264: x264, Stdbuf: stdbuf, Width: w, Height: h, FPS: 30,
			CRF: crfFor(quality), Subme: 1,
			Dir:     cfg.RunDir,
			Spawner: sp, Credential: cred,
			LogPath: filepath.Join(cfg.RunDir, "logs", "x264.log"),
		})
	}
}

// crfFor maps a viewer's JPEG quality level (0-9, noVNC's default 6) to
// x264's rate factor, 2 a level: level 6 gives 22, which on the bench's
// grainy video, with quarter-pixel motion, comes to a little better than
// the fidelity of Tight's JPEG at that level (SSIM 0.91-0.92 against
// 0.90) in a fifth of its bytes (9.8 against 45 Mbit/s). Whole-pixel
// motion needed 24 for 0.87 in the same bytes.
func crfFor(quality int) int { return 34 - 2*min(max(quality, 0), 9) }

// exportEncoders starts x264 children (as the GUI user) for MP4 exports
// of desktop recordings, whatever --h264 says (that is for viewers);
// nil when no x264 is installed (export answers 501).
func exportEncoders(cfg *Config, sp *proc.Spawner, cred *syscall.Credential) func(w, h, fps int) (record.FrameEncoder, error) {
	x264, stdbuf, err := h264enc.Find(cfg.X264)
	if err != nil {
		return nil
	}
	return func(w, h, fps int) (record.FrameEncoder, error) {
		// An export is watched later, in a player: a better rate factor
		// than live video's, a slower preset, and the high profile
		// (CABAC, 8x8 transforms: 66 s of a scrolled photo gallery, 36.1
		// MB against 42.2 in baseline; the medium preset gave no less
		// in twice the time).
		return h264enc.Start(h264enc.Config{
			X264: x264, Stdbuf: stdbuf, Width: w, Height: h, FPS: fps,
			CRF: 23, Preset: "veryfast", Profile: "high", Timeout: 10 * time.Second,
			Dir:     cfg.RunDir,
			Spawner: sp, Credential: cred,
			LogPath: filepath.Join(cfg.RunDir, "logs", "x264-export.log"),
		})
	}
}
