package h264enc

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// x264's FLV output, read as it comes: FLV gives every frame a length,
// which raw Annex-B does not (a frame ends only where the next begins),
// so a frame is known whole the moment its tag is read.
//
// File header (FLV spec v10, E.2): "FLV", u8 version, u8 flags, u32 header
// size (9), then u32 PreviousTagSize0. Each tag (E.4.1):
//
//	u8 type (8 audio, 9 video, 18 script data), u24 data size,
//	u24 timestamp, u8 timestamp high byte, u24 stream id (0),
//	data, u32 size of the tag just read (11 + data size)
//
// Video data (E.4.3.1) for AVC: u8 frame type<<4 | codec id (7), u8 AVC
// packet type (0 sequence header, 1 NAL units, 2 end of sequence), s24
// composition time, then for 0 an AVCDecoderConfigurationRecord
// (ISO/IEC 14496-15 5.2.4.1: u8 version, profile, compatibility, level,
// u8 0xfc|length size-1, u8 0xe0|SPS count, per SPS u16 size and bytes,
// u8 PPS count, per PPS u16 size and bytes), for 1 NAL units each after
// a big-endian length of that size.

const (
	tagAudio  = 8
	tagVideo  = 9
	tagScript = 18

	codecAVC = 7

	avcSequenceHeader = 0
	avcNALU           = 1
	avcEndOfSequence  = 2
)

// NAL unit types (ITU-T H.264 Table 7-1) that matter here.
const (
	nalSlice    = 1 // coded slice of a non-IDR picture
	nalSliceIDR = 5 // coded slice of an IDR picture
	nalSEI      = 6
	nalSPS      = 7
	nalPPS      = 8
	nalAUD      = 9
)

// MaxFrameBytes bounds one encoded frame (a tag's data): far above what
// x264 makes of a 4096x4096 screen at the qualities used here, far below
// FLV's own bound (16 MiB).
const MaxFrameBytes = 8 << 20

// errFormat is what a stream that is not x264's FLV of H.264 gives.
var errFormat = errors.New("h264enc: not an FLV stream of H.264")

// flvReader reads tags from x264's FLV output.
type flvReader struct {
	r       *bufio.Reader
	started bool   // the file header has been read
	buf     []byte // the last tag's data
	// lengthSize is the NAL unit length size of the sequence header (1,
	// 2 or 4); 0 until one came.
	lengthSize int
	sps, pps   [][]byte
}

func newFLVReader(r io.Reader) *flvReader { return &flvReader{r: bufio.NewReaderSize(r, 64<<10)} }

// frame is one coded picture.
type frame struct {
	key  bool
	nals [][]byte // each without start code or length; valid until the next read
}

// next reads tags until a coded picture and returns it. Sequence headers
// on the way replace the parameter sets; script data is skipped.
func (f *flvReader) next() (frame, error) {
	if !f.started {
		var h [13]byte
		if _, err := io.ReadFull(f.r, h[:]); err != nil {
			return frame{}, fmt.Errorf("h264enc: FLV header: %w", err)
		}
		if string(h[:3]) != "FLV" || binary.BigEndian.Uint32(h[5:9]) != 9 {
			return frame{}, fmt.Errorf("%w: header % x", errFormat, h[:9])
		}
		f.started = true
	}
	for {
		var h [11]byte
		if _, err := io.ReadFull(f.r, h[:]); err != nil {
			return frame{}, fmt.Errorf("h264enc: FLV tag: %w", err)
		}
		size := int(h[1])<<16 | int(h[2])<<8 | int(h[3])
		if size > MaxFrameBytes {
			return frame{}, fmt.Errorf("%w: a tag of %d bytes (at most %d)", errFormat, size, MaxFrameBytes)
		}
		if cap(f.buf) < size+4 {
			f.buf = make([]byte, size+4)
		}
		data := f.buf[:size+4]
		if _, err := io.ReadFull(f.r, data); err != nil {
			return frame{}, fmt.Errorf("h264enc: FLV tag data: %w", err)
		}
		if prev := binary.BigEndian.Uint32(data[size:]); prev != uint32(size+11) {
			return frame{}, fmt.Errorf("%w: tag size %d, trailer says %d", errFormat, size+11, prev)
		}
		data = data[:size]
		switch h[0] & 0x1f {
		case tagScript, tagAudio:
			continue
		case tagVideo:
		default:
			return frame{}, fmt.Errorf("%w: tag type %d", errFormat, h[0])
		}
		if len(data) < 5 || data[0]&0x0f != codecAVC {
			return frame{}, fmt.Errorf("%w: a video tag that is not AVC", errFormat)
		}
		key, body := data[0]>>4 == 1, data[5:]
		switch data[1] {
		case avcSequenceHeader:
			if err := f.sequenceHeader(body); err != nil {
				return frame{}, err
			}
		case avcNALU:
			if f.lengthSize == 0 {
				return frame{}, fmt.Errorf("%w: a picture before the sequence header", errFormat)
			}
			fr := frame{key: key}
			for len(body) > 0 {
				if len(body) < f.lengthSize {
					return frame{}, fmt.Errorf("%w: a NAL unit length cut short", errFormat)
				}
				n := 0
				for _, b := range body[:f.lengthSize] {
					n = n<<8 | int(b)
				}
				body = body[f.lengthSize:]
				if n == 0 || n > len(body) {
					return frame{}, fmt.Errorf("%w: a NAL unit of %d bytes in %d", errFormat, n, len(body))
				}
				nal := body[:n]
				body = body[n:]
				if nal[0]&0x80 != 0 {
					return frame{}, fmt.Errorf("%w: a NAL unit with its forbidden bit set", errFormat)
				}
				if nal[0]&0x1f == nalSliceIDR {
					fr.key = true
				}
				fr.nals = append(fr.nals, nal)
			}
			return fr, nil
		case avcEndOfSequence:
			return frame{}, io.EOF
		default:
			return frame{}, fmt.Errorf("%w: AVC packet type %d", errFormat, data[1])
		}
	}
}

// sequenceHeader takes the parameter sets of an
// AVCDecoderConfigurationRecord.
func (f *flvReader) sequenceHeader(b []byte) error {
	if len(b) < 6 || b[0] != 1 {
		return fmt.Errorf("%w: a decoder configuration record of %d bytes", errFormat, len(b))
	}
	ls := int(b[4]&3) + 1
	if ls == 3 {
		return fmt.Errorf("%w: NAL unit lengths of 3 bytes", errFormat)
	}
	sets := func(b []byte, n int) ([][]byte, []byte, error) {
		var out [][]byte
		for range n {
			if len(b) < 2 {
				return nil, nil, fmt.Errorf("%w: a parameter set cut short", errFormat)
			}
			size := int(binary.BigEndian.Uint16(b))
			if size == 0 || size > len(b)-2 {
				return nil, nil, fmt.Errorf("%w: a parameter set of %d bytes in %d", errFormat, size, len(b)-2)
			}
			out = append(out, append([]byte(nil), b[2:2+size]...))
			b = b[2+size:]
		}
		return out, b, nil
	}
	sps, rest, err := sets(b[6:], int(b[5]&0x1f))
	if err != nil {
		return err
	}
	if len(rest) < 1 {
		return fmt.Errorf("%w: no PPS count", errFormat)
	}
	pps, _, err := sets(rest[1:], int(rest[0]))
	if err != nil {
		return err
	}
	if len(sps) == 0 || len(pps) == 0 {
		return fmt.Errorf("%w: %d SPS and %d PPS", errFormat, len(sps), len(pps))
	}
	f.lengthSize, f.sps, f.pps = ls, sps, pps
	return nil
}

// startCode begins every NAL unit of an Annex-B stream (B.1.1).
var startCode = []byte{0, 0, 0, 1}

// appendAnnexB appends fr as Annex-B to dst: the parameter sets before a
// key frame (a decoder may start there), then the picture's slices and
// parameter sets. Access unit delimiters and SEI are left out: noVNC
// logs a warning for every unit it does not know, and SEI carries only
// x264's settings text.
func (f *flvReader) appendAnnexB(dst []byte, fr frame) []byte {
	if fr.key {
		for _, s := range f.sps {
			dst = append(append(dst, startCode...), s...)
		}
		for _, p := range f.pps {
			dst = append(append(dst, startCode...), p...)
		}
	}
	for _, nal := range fr.nals {
		switch nal[0] & 0x1f {
		case nalAUD, nalSEI:
			continue
		}
		dst = append(append(dst, startCode...), nal...)
	}
	return dst
}
