package h264enc

// The encoder is fed I420 converted here, not BGRA for x264 to convert:
// x264 converts through libswscale with BT.601 coefficients whatever the
// stream says, and Chromium's WebCodecs (what noVNC decodes with) turns
// the pictures back into RGB with BT.709 whatever the stream says: flat
// colours came out with green off by up to 15. Converting here, with the
// matrix the decoder uses and the stream names (BT.709, limited range),
// also takes libswscale's half of x264's time off, and a third of the
// bytes off the pipe.

// BT.709 limited range (ITU-R BT.709-6 3.2, 3.4), in 1/65536:
// Y = 16 + 219/255·(Kr R + Kg G + Kb B), Cb and Cr = 128 + 224/255 of
// the colour differences.
const (
	yR, yG, yB    = 11966, 40254, 4064   // 0.182586, 0.614231, 0.062007
	cbR, cbG, cbB = -6596, -22189, 28784 // -0.100644, -0.338572, 0.439216
	crR, crG, crB = 28784, -26145, -2639 // 0.439216, -0.398942, -0.040274
	half          = 1 << 15
)

// toI420 converts the w×h BGRX picture pix (stride bytes a row; w and h
// even) into dst: the Y plane, then Cb and Cr at half resolution each
// way (chroma from the mean of each 2×2 block). Eight columns at a time
// go through the AVX2 kernel where there is one (the same arithmetic:
// the same bytes); the rest here.
func toI420(dst, pix []byte, stride, w, h int) {
	yp := dst[:w*h]
	cb := dst[w*h : w*h+w*h/4]
	cr := dst[w*h+w*h/4 : w*h+w*h/2]
	cw := w / 2
	for y := 0; y < h; y += 2 {
		r0 := pix[y*stride : y*stride+4*w]
		r1 := pix[(y+1)*stride : (y+1)*stride+4*w]
		y0 := yp[y*w : y*w+w]
		y1 := yp[(y+1)*w : (y+1)*w+w]
		cbRow := cb[y/2*cw : y/2*cw+cw]
		crRow := cr[y/2*cw : y/2*cw+cw]
		done := i420Rows(y0, y1, cbRow, crRow, r0, r1) // columns done
		i420RowsGo(y0[done:], y1[done:], cbRow[done/2:], crRow[done/2:], r0[4*done:], r1[4*done:])
	}
}

// i420RowsGo converts two rows of BGRX, r0 and r1, into their luma rows
// y0 and y1 and a row of each chroma plane.
func i420RowsGo(y0, y1, cbRow, crRow, r0, r1 []byte) {
	{
		for x := range len(cbRow) {
			a, b := r0[8*x:8*x+8], r1[8*x:8*x+8]
			b00, g00, r00 := int32(a[0]), int32(a[1]), int32(a[2])
			b01, g01, r01 := int32(a[4]), int32(a[5]), int32(a[6])
			b10, g10, r10 := int32(b[0]), int32(b[1]), int32(b[2])
			b11, g11, r11 := int32(b[4]), int32(b[5]), int32(b[6])
			y0[2*x] = byte((yR*r00 + yG*g00 + yB*b00 + 16<<16 + half) >> 16)
			y0[2*x+1] = byte((yR*r01 + yG*g01 + yB*b01 + 16<<16 + half) >> 16)
			y1[2*x] = byte((yR*r10 + yG*g10 + yB*b10 + 16<<16 + half) >> 16)
			y1[2*x+1] = byte((yR*r11 + yG*g11 + yB*b11 + 16<<16 + half) >> 16)
			rs, gs, bs := r00+r01+r10+r11, g00+g01+g10+g11, b00+b01+b10+b11 // 4× the mean
			cbRow[x] = byte((cbR*rs + cbG*gs + cbB*bs + 128<<18 + 1<<17) >> 18)
			crRow[x] = byte((crR*rs + crG*gs + crB*bs + 128<<18 + 1<<17) >> 18)
		}
	}
}
