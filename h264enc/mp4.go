package h264enc

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"
)

// MP4Writer makes an MP4 file (ISO/IEC 14496-12, the AVC file format of
// 14496-15) of H.264 pictures (Annex-B, as Encode returns them), which
// browsers and players open and can start playing before the whole file
// has come: the pictures go to a writer as they come (the samples), and
// Close returns what goes before them: ftyp, moov describing them, and
// mdat's header. Big-endian throughout; each box is u32 size, 4-byte
// type, body:
//
//	ftyp  major brand, u32 minor version, compatible brands
//	moov  mvhd (time scale, duration), trak: tkhd (size), mdia: mdhd,
//	      hdlr "vide", minf: vmhd, dinf/dref, stbl: stsd with avc1 and
//	      its avcC (the SPS and PPS), stts (durations), stss (key
//	      frames), stsc (one chunk of every sample), stsz (sizes), stco
//	      (the chunk's offset: right after mdat's header)
//	mdat  u32 1, "mdat", u64 size (the large form), then the samples:
//	      a picture's NAL units, each after a u32 length
//
// Times are milliseconds (the time scale is 1000).
type MP4Writer struct {
	w             io.Writer
	width, height int
	off           int64 // bytes of samples written
	sizes         []uint32
	times         []uint32 // each sample's start, ms
	keys          []uint32 // 1-based numbers of the key frames
	sps, pps      []byte
	dur           uint32 // the file's duration, ms (Close)
	chunk         uint32 // the samples' offset in the file (Close)
	buf           []byte
	err           error
}

// maxMP4Time bounds a picture's time: mvhd version 0 keeps durations in
// u32 milliseconds (49 days).
const maxMP4Time = time.Duration(1<<32-1) * time.Millisecond

// NewMP4Writer starts an MP4 file of width×height pictures whose samples
// go to w.
func NewMP4Writer(w io.Writer, width, height int) (*MP4Writer, error) {
	if width < MinSize || height < MinSize || width > MaxSize || height > MaxSize {
		return nil, fmt.Errorf("%w: %dx%d", ErrSize, width, height)
	}
	return &MP4Writer{w: w, width: width, height: height}, nil
}

// Samples is the bytes of samples written so far.
func (m *MP4Writer) Samples() int64 { return m.off }

// errNoParameterSets: the first picture was not a key frame with its SPS
// and PPS.
var errNoParameterSets = errors.New("h264enc: mp4: the first picture has no SPS and PPS")

// WriteFrame adds a picture shown from at (after the last one's; the
// first shows from the start), its NAL units in Annex-B. SPS and PPS go
// to the avcC (the first ones seen), access unit delimiters nowhere; the
// rest make the sample.
func (m *MP4Writer) WriteFrame(annexB []byte, key bool, at time.Duration) error {
	if m.err != nil {
		return m.err
	}
	ms := at.Milliseconds()
	switch {
	case at < 0 || at > maxMP4Time:
		return fmt.Errorf("h264enc: mp4: picture at %v", at)
	case len(m.times) > 0 && ms <= int64(m.times[len(m.times)-1]):
		return fmt.Errorf("h264enc: mp4: picture at %v is not after the last", at)
	}
	m.buf = m.buf[:0]
	for _, nal := range splitAnnexB(annexB) {
		switch nal[0] & 0x1f {
		case nalSPS:
			if m.sps == nil {
				m.sps = bytes.Clone(nal)
			}
		case nalPPS:
			if m.pps == nil {
				m.pps = bytes.Clone(nal)
			}
		case nalAUD:
		default:
			m.buf = binary.BigEndian.AppendUint32(m.buf, uint32(len(nal)))
			m.buf = append(m.buf, nal...)
		}
	}
	if m.sps == nil || m.pps == nil || len(m.sps) < 4 {
		return errNoParameterSets
	}
	if len(m.buf) == 0 {
		return errors.New("h264enc: mp4: a picture without slices")
	}
	if len(m.times) == 0 {
		ms = 0
	}
	if _, err := m.w.Write(m.buf); err != nil {
		m.err = fmt.Errorf("h264enc: mp4: %w", err)
		return m.err
	}
	m.off += int64(len(m.buf))
	m.sizes = append(m.sizes, uint32(len(m.buf)))
	m.times = append(m.times, uint32(ms))
	if key {
		m.keys = append(m.keys, uint32(len(m.sizes)))
	}
	return nil
}

// Close ends the file at end (the last picture shows until then, at
// least a millisecond) and returns what goes before the samples.
func (m *MP4Writer) Close(end time.Duration) ([]byte, error) {
	if m.err != nil {
		return nil, m.err
	}
	m.err = errors.New("h264enc: mp4: closed")
	n := len(m.sizes)
	if n == 0 {
		return nil, errors.New("h264enc: mp4: no pictures")
	}
	if len(m.keys) == 0 || m.keys[0] != 1 {
		return nil, errors.New("h264enc: mp4: the first picture is not a key frame")
	}
	last := int64(m.times[n-1])
	m.dur = uint32(min(max(end.Milliseconds(), last+1), int64(maxMP4Time/time.Millisecond)))
	b := box(nil, "ftyp", func(b []byte) []byte {
		b = append(b, "isom"...)
		b = binary.BigEndian.AppendUint32(b, 0x200)
		return append(b, "isomiso2avc1mp41"...)
	})
	// moov's size does not depend on the offset it holds.
	m.chunk = uint32(len(b) + len(m.moov()) + 16)
	b = append(b, m.moov()...)
	b = binary.BigEndian.AppendUint32(b, 1)
	b = append(b, "mdat"...)
	return binary.BigEndian.AppendUint64(b, uint64(16+m.off)), nil
}

// unity is the identity transformation matrix of mvhd and tkhd.
var unity = [9]uint32{0x10000, 0, 0, 0, 0x10000, 0, 0, 0, 0x40000000}

func (m *MP4Writer) moov() []byte {
	dur := m.dur
	u32 := binary.BigEndian.AppendUint32
	u16 := binary.BigEndian.AppendUint16
	matrix := func(b []byte) []byte {
		for _, v := range unity {
			b = u32(b, v)
		}
		return b
	}
	full := func(b []byte, flags uint32) []byte { return u32(b, flags) } // version 0
	return box(nil, "moov", func(b []byte) []byte {
		b = box(b, "mvhd", func(b []byte) []byte {
			b = full(b, 0)
			b = u32(u32(b, 0), 0) // created, modified
			b = u32(u32(b, 1000), dur)
			b = u16(u32(b, 0x10000), 0x100) // rate 1.0, volume 1.0
			b = append(b, make([]byte, 10)...)
			b = matrix(b)
			b = append(b, make([]byte, 24)...)
			return u32(b, 2) // next track
		})
		return box(b, "trak", func(b []byte) []byte {
			b = box(b, "tkhd", func(b []byte) []byte {
				b = full(b, 3) // enabled, in the movie
				b = u32(u32(b, 0), 0)
				b = u32(u32(b, 1), 0) // track 1, reserved
				b = u32(b, dur)
				b = append(b, make([]byte, 16)...) // reserved, layer, group, volume, reserved
				b = matrix(b)
				return u32(u32(b, uint32(m.width)<<16), uint32(m.height)<<16)
			})
			return box(b, "mdia", func(b []byte) []byte {
				b = box(b, "mdhd", func(b []byte) []byte {
					b = full(b, 0)
					b = u32(u32(b, 0), 0)
					b = u32(u32(b, 1000), dur)
					return u16(u16(b, 0x55c4), 0) // "und"
				})
				b = box(b, "hdlr", func(b []byte) []byte {
					b = u32(full(b, 0), 0)
					b = append(b, "vide"...)
					b = append(b, make([]byte, 12)...)
					return append(b, "deskd video\x00"...)
				})
				return box(b, "minf", func(b []byte) []byte {
					b = box(b, "vmhd", func(b []byte) []byte { return append(full(b, 1), make([]byte, 8)...) })
					b = box(b, "dinf", func(b []byte) []byte {
						return box(b, "dref", func(b []byte) []byte {
							b = u32(full(b, 0), 1)
							return box(b, "url ", func(b []byte) []byte { return full(b, 1) }) // in this file
						})
					})
					return box(b, "stbl", m.stbl)
				})
			})
		})
	})
}

func (m *MP4Writer) stbl(b []byte) []byte {
	u32 := binary.BigEndian.AppendUint32
	u16 := binary.BigEndian.AppendUint16
	n := len(m.sizes)
	b = box(b, "stsd", func(b []byte) []byte {
		b = u32(u32(b, 0), 1)
		return box(b, "avc1", func(b []byte) []byte {
			b = append(b, make([]byte, 6)...)
			b = u16(b, 1) // data reference
			b = append(b, make([]byte, 16)...)
			b = u16(u16(b, uint16(m.width)), uint16(m.height))
			b = u32(u32(b, 0x480000), 0x480000) // 72 dpi
			b = u16(u32(b, 0), 1)               // one frame a sample
			b = append(b, make([]byte, 32)...)  // compressor name
			b = u16(u16(b, 0x18), 0xffff)       // depth 24, no colour table
			return box(b, "avcC", func(b []byte) []byte {
				b = append(b, 1, m.sps[1], m.sps[2], m.sps[3], 0xff, 0xe1) // 4-byte lengths, one SPS
				b = append(u16(b, uint16(len(m.sps))), m.sps...)
				return append(u16(append(b, 1), uint16(len(m.pps))), m.pps...)
			})
		})
	})
	b = box(b, "stts", func(b []byte) []byte {
		at := len(b) + 4
		b = u32(u32(b, 0), 0)
		runs := 0
		var count, delta uint32
		for i := range n {
			d := uint32(1)
			if i+1 < n {
				d = m.times[i+1] - m.times[i]
			} else if m.dur > m.times[i] {
				d = m.dur - m.times[i]
			}
			if count > 0 && d == delta {
				count++
				continue
			}
			if count > 0 {
				b = u32(u32(b, count), delta)
				runs++
			}
			count, delta = 1, d
		}
		b = u32(u32(b, count), delta)
		binary.BigEndian.PutUint32(b[at:], uint32(runs+1))
		return b
	})
	b = box(b, "stss", func(b []byte) []byte {
		b = u32(u32(b, 0), uint32(len(m.keys)))
		for _, k := range m.keys {
			b = u32(b, k)
		}
		return b
	})
	b = box(b, "stsc", func(b []byte) []byte {
		b = u32(u32(b, 0), 1)
		return u32(u32(u32(b, 1), uint32(n)), 1)
	})
	b = box(b, "stsz", func(b []byte) []byte {
		b = u32(u32(u32(b, 0), 0), uint32(n))
		for _, s := range m.sizes {
			b = u32(b, s)
		}
		return b
	})
	return box(b, "stco", func(b []byte) []byte {
		return u32(u32(u32(b, 0), 1), m.chunk)
	})
}

// box appends a box of type typ whose body body appends.
func box(b []byte, typ string, body func([]byte) []byte) []byte {
	at := len(b)
	b = append(b, 0, 0, 0, 0)
	b = append(b, typ...)
	b = body(b)
	binary.BigEndian.PutUint32(b[at:], uint32(len(b)-at))
	return b
}

// splitAnnexB returns the NAL units of b, each without its start code
// (00 00 01, or 00 00 00 01) and trailing zero bytes.
func splitAnnexB(b []byte) [][]byte {
	var out [][]byte
	start := -1
	for i := 0; i+2 < len(b); {
		if b[i] == 0 && b[i+1] == 0 && b[i+2] == 1 {
			if start >= 0 {
				out = appendNAL(out, b[start:i])
			}
			i += 3
			start = i
			continue
		}
		i++
	}
	if start >= 0 {
		out = appendNAL(out, b[start:])
	}
	return out
}

func appendNAL(out [][]byte, nal []byte) [][]byte {
	nal = bytes.TrimRight(nal, "\x00")
	if len(nal) == 0 {
		return out
	}
	return append(out, nal)
}
