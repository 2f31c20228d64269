package h264enc

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
)

// flvHeader is x264's FLV file header and PreviousTagSize0.
var flvHeader = []byte{'F', 'L', 'V', 1, 1, 0, 0, 0, 9, 0, 0, 0, 0}

// flvTag is one tag of type typ around data, with its trailer.
func flvTag(typ byte, data []byte) []byte {
	n := len(data)
	b := []byte{typ, byte(n >> 16), byte(n >> 8), byte(n), 0, 0, 0, 0, 0, 0, 0}
	b = append(b, data...)
	return binary.BigEndian.AppendUint32(b, uint32(n+11))
}

// seqHeader is a video tag's data holding an AVC decoder configuration
// record with one SPS and one PPS.
func seqHeader(sps, pps []byte) []byte {
	b := []byte{0x17, avcSequenceHeader, 0, 0, 0, 1, sps[1], sps[2], sps[3], 0xff, 0xe1}
	b = binary.BigEndian.AppendUint16(b, uint16(len(sps)))
	b = append(b, sps...)
	b = append(b, 1)
	b = binary.BigEndian.AppendUint16(b, uint16(len(pps)))
	return append(b, pps...)
}

// picture is a video tag's data holding NAL units with 4-byte lengths.
func picture(key bool, nals ...[]byte) []byte {
	b := []byte{0x27, avcNALU, 0, 0, 0}
	if key {
		b[0] = 0x17
	}
	for _, n := range nals {
		b = binary.BigEndian.AppendUint32(b, uint32(len(n)))
		b = append(b, n...)
	}
	return b
}

var (
	testSPS = []byte{0x67, 0x42, 0xc0, 0x1f, 0xda, 0x01}
	testPPS = []byte{0x68, 0xce, 0x3c, 0x80}
	testIDR = []byte{0x65, 0x88, 0x84, 0x00}
	testP   = []byte{0x41, 0x9a, 0x02}
	testAUD = []byte{0x09, 0xf0}
	testSEI = []byte{0x06, 0x05, 0x01, 0xaa}
)

func wrongTrailer(tag []byte) []byte { tag[len(tag)-1]++; return tag }

func stream(parts ...[]byte) []byte { return bytes.Join(append([][]byte{flvHeader}, parts...), nil) }

func TestFLVReader(t *testing.T) {
	annexB := func(nals ...[]byte) []byte {
		var b []byte
		for _, n := range nals {
			b = append(append(b, startCode...), n...)
		}
		return b
	}
	good := stream(flvTag(tagScript, []byte("onMetaData...")), flvTag(tagVideo, seqHeader(testSPS, testPPS)),
		flvTag(tagVideo, picture(true, testAUD, testSEI, testIDR)), flvTag(tagVideo, picture(false, testAUD, testP)))
	tests := []struct {
		name    string
		in      []byte
		want    [][]byte // Annex-B of each picture
		wantErr error    // after the pictures
	}{
		{"x264's stream", good, [][]byte{annexB(testSPS, testPPS, testIDR), annexB(testP)}, io.EOF},
		{"cut in a tag", good[:len(good)-3], [][]byte{annexB(testSPS, testPPS, testIDR)}, io.ErrUnexpectedEOF},
		{"empty", nil, nil, io.EOF},
		{"not FLV", []byte("RIFF\x00\x00\x00\x00WAVEfmt "), nil, errFormat},
		{"header size not 9", append([]byte{'F', 'L', 'V', 1, 1, 0, 0, 0, 99}, 0, 0, 0, 0), nil, errFormat},
		{"a picture before the sequence header", stream(flvTag(tagVideo, picture(true, testIDR))), nil, errFormat},
		{"a tag over the bound", stream([]byte{tagVideo, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0}), nil, errFormat},
		{"a wrong trailer", stream(wrongTrailer(flvTag(tagVideo, seqHeader(testSPS, testPPS)))), nil, errFormat},
		{"an unknown tag type", stream(flvTag(7, []byte{1, 2, 3})), nil, errFormat},
		{"a codec that is not AVC", stream(flvTag(tagVideo, []byte{0x12, 0, 0, 0, 0, 0})), nil, errFormat},
		{"a video tag too short", stream(flvTag(tagVideo, []byte{0x17})), nil, errFormat},
		{"a NAL length past the tag", stream(flvTag(tagVideo, seqHeader(testSPS, testPPS)),
			flvTag(tagVideo, []byte{0x17, avcNALU, 0, 0, 0, 0, 0, 0x10, 0, 0x65})), nil, errFormat},
		{"a NAL length of 0", stream(flvTag(tagVideo, seqHeader(testSPS, testPPS)),
			flvTag(tagVideo, []byte{0x17, avcNALU, 0, 0, 0, 0, 0, 0, 0})), nil, errFormat},
		{"a NAL length cut short", stream(flvTag(tagVideo, seqHeader(testSPS, testPPS)),
			flvTag(tagVideo, []byte{0x17, avcNALU, 0, 0, 0, 0, 0})), nil, errFormat},
		{"a forbidden bit", stream(flvTag(tagVideo, seqHeader(testSPS, testPPS)),
			flvTag(tagVideo, picture(true, []byte{0xe5, 1}))), nil, errFormat},
		{"no SPS", stream(flvTag(tagVideo, []byte{0x17, 0, 0, 0, 0, 1, 0x42, 0, 0x1f, 0xff, 0xe0, 1, 0, 1, 0x68})), nil, errFormat},
		{"a parameter set past the record", stream(flvTag(tagVideo, []byte{0x17, 0, 0, 0, 0, 1, 0x42, 0, 0x1f, 0xff, 0xe1, 0, 9, 0x67})), nil, errFormat},
		{"no PPS count", stream(flvTag(tagVideo, []byte{0x17, 0, 0, 0, 0, 1, 0x42, 0, 0x1f, 0xff, 0xe1, 0, 1, 0x67})), nil, errFormat},
		{"3-byte lengths", stream(flvTag(tagVideo, []byte{0x17, 0, 0, 0, 0, 1, 0x42, 0, 0x1f, 0xfe, 0xe1, 0, 1, 0x67, 1, 0, 1, 0x68})), nil, errFormat},
		{"a configuration version not 1", stream(flvTag(tagVideo, []byte{0x17, 0, 0, 0, 0, 2, 0x42, 0, 0x1f, 0xff, 0xe1, 0, 1, 0x67, 1, 0, 1, 0x68})), nil, errFormat},
		{"end of sequence", stream(flvTag(tagVideo, []byte{0x17, avcEndOfSequence, 0, 0, 0})), nil, io.EOF},
		{"an unknown packet type", stream(flvTag(tagVideo, []byte{0x17, 9, 0, 0, 0})), nil, errFormat},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFLVReader(bytes.NewReader(tt.in))
			for i, want := range tt.want {
				fr, err := f.next()
				if err != nil {
					t.Fatalf("picture %d: %v", i, err)
				}
				if got := f.appendAnnexB(nil, fr); !bytes.Equal(got, want) {
					t.Fatalf("picture %d: % x, want % x", i, got, want)
				}
			}
			if _, err := f.next(); !errors.Is(err, tt.wantErr) {
				t.Fatalf("then %v, want %v", err, tt.wantErr)
			}
		})
	}
}

// FuzzFLVReader: any input ends in an error without a panic, and every
// picture it gives is Annex-B whose units have their forbidden bit clear.
func FuzzFLVReader(f *testing.F) {
	f.Add(stream(flvTag(tagScript, []byte("x")), flvTag(tagVideo, seqHeader(testSPS, testPPS)),
		flvTag(tagVideo, picture(true, testAUD, testSEI, testIDR)), flvTag(tagVideo, picture(false, testP))))
	f.Add(stream(flvTag(tagVideo, []byte{0x17, 0, 0, 0, 0, 1, 0x42, 0, 0x1f, 0xfd, 0xe1, 0, 1, 0x67, 1, 0, 1, 0x68}),
		flvTag(tagVideo, []byte{0x17, 1, 0, 0, 0, 0, 2, 0x65, 0})))
	f.Add(flvHeader)
	f.Fuzz(func(t *testing.T, in []byte) {
		r := newFLVReader(bytes.NewReader(in))
		for range 64 {
			fr, err := r.next()
			if err != nil {
				return
			}
			b := r.appendAnnexB(nil, fr)
			if len(b) > len(in)+64*len(r.sps)+64*len(r.pps)+4*len(fr.nals)+1024 {
				t.Fatalf("%d bytes of Annex-B from %d in", len(b), len(in))
			}
			for _, n := range fr.nals {
				if len(n) == 0 || n[0]&0x80 != 0 {
					t.Fatalf("a NAL unit % x", n)
				}
			}
		}
	})
}
