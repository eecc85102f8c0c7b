// common.h: the one header shared by the real Metal compiler and the Linux
// emulator (metal/emu), inlined into the library source by kernels.Source.
// Where Metal and C++ disagree, kernels use the portable spellings defined
// here; everything else is plain Metal Shading Language.
#ifndef MACPOOL_COMMON_H
#define MACPOOL_COMMON_H

#ifdef __METAL_VERSION__
#include <metal_stdlib>
using namespace metal;
// TG_MEM declares threadgroup memory at kernel scope:
//   TG_MEM float partial[32];
#define TG_MEM threadgroup
// DEVICE_PTR(p): a device pointer read from memory (a pointer table). On
// Metal it is the pointer; the emulator checks that its buffer is resident.
#define DEVICE_PTR(p) (p)
#else
// The emulator runs the threads of one threadgroup as fibers on one OS
// thread, so per-OS-thread storage is exactly per-threadgroup storage.
using namespace metal;
#define TG_MEM static thread_local
#define DEVICE_PTR(p) ((decltype(p))emu_device_ptr((const void *)(p)))
#endif

#define NEG_BIG (-1.0e30f)

// Weight storage formats (mirror metal.fmt* on the Go side).
#define FMT_F32 0
#define FMT_F16 1
#define FMT_BF16 2
#define FMT_Q8_0 3
#define FMT_Q4_0 4
#define FMT_MLX 5
#define FMT_Q4_K 6
#define FMT_Q6_K 7
#define FMT_Q5_K 8

inline float bf16_to_f32(ushort v) { return as_type<float>(uint(v) << 16); }
inline float f16_to_f32(ushort v) { return float(as_type<half>(v)); }

// softplus as torch computes it (linear above 20). MSL has no log1p; for
// x << 0 the absolute error of log(1 + exp(x)) is below 1e-7.
inline float softplus(float x) { return x > 20.0f ? x : log(1.0f + exp(x)); }

// Little-endian loads at any byte offset (checkpoint rows are unaligned).
inline ushort load_u16(device const uchar *p) { return ushort(p[0]) | ushort(ushort(p[1]) << 8); }
inline float load_f32(device const uchar *p) {
	return as_type<float>(uint(p[0]) | (uint(p[1]) << 8) | (uint(p[2]) << 16) | (uint(p[3]) << 24));
}

// load_scalar reads element i of a float-format vector (scales, biases).
inline float load_scalar(device const uchar *p, uint fmt, uint i) {
	if (fmt == FMT_F32) return load_f32(p + 4 * i);
	if (fmt == FMT_F16) return f16_to_f32(load_u16(p + 2 * i));
	return bf16_to_f32(load_u16(p + 2 * i));
}

// WeightParams describe one weight matrix [rows, cols] as stored.
struct WeightParams {
	uint fmt;       // FMT_*
	uint rows, cols;
	uint row_bytes; // bytes per stored row
	uint bits;      // MLX: 4 or 8
	uint group;     // MLX: values per scale/bias group
	uint sfmt;      // MLX: format of scales (FMT_F32/F16/BF16)
	uint bfmt;      // MLX: format of biases
};

// load8 decodes values [8c, 8c+8) of row r into w. Every supported format
// has rows that are whole chunks of 8 when cols % 8 == 0 (block formats:
// cols % 32 == 0; MLX: group % 8 == 0).
inline void load8(device const uchar *W, device const uchar *S, device const uchar *B,
                  constant WeightParams &wp, uint r, uint c, thread float *w) {
	device const uchar *row = W + ulong(r) * wp.row_bytes;
	uint j0 = 8 * c;
	switch (wp.fmt) {
	case FMT_F32:
		for (uint i = 0; i < 8; i++) w[i] = load_f32(row + 4 * (j0 + i));
		break;
	case FMT_F16:
		for (uint i = 0; i < 8; i++) w[i] = f16_to_f32(load_u16(row + 2 * (j0 + i)));
		break;
	case FMT_BF16:
		for (uint i = 0; i < 8; i++) w[i] = bf16_to_f32(load_u16(row + 2 * (j0 + i)));
		break;
	case FMT_Q8_0: {
		device const uchar *blk = row + (j0 / 32) * 34;
		float d = f16_to_f32(load_u16(blk));
		device const char *q = (device const char *)(blk + 2 + j0 % 32);
		for (uint i = 0; i < 8; i++) w[i] = d * float(q[i]);
		break;
	}
	case FMT_Q4_0: {
		device const uchar *blk = row + (j0 / 32) * 18;
		float d = f16_to_f32(load_u16(blk));
		uint o = j0 % 32;
		for (uint i = 0; i < 8; i++) {
			uint j = o + i;
			uchar b = blk[2 + (j & 15)];
			int q = j < 16 ? int(b & 15) : int(b >> 4);
			w[i] = d * float(q - 8);
		}
		break;
	}
	case FMT_Q4_K:   // super-blocks of 256: f16 d, f16 dmin, 12 bytes of 6-bit scale/min pairs, 128 bytes of nibbles
	case FMT_Q5_K: { // as Q4_K with 32 bytes of fifth bits (qh) before the nibbles
		bool five = wp.fmt == FMT_Q5_K;
		device const uchar *blk = row + (j0 / 256) * (five ? 176 : 144);
		float d = f16_to_f32(load_u16(blk)), dmin = f16_to_f32(load_u16(blk + 2));
		device const uchar *sc = blk + 4;
		uint v = j0 % 256, sb = v / 32;
		uint scv, mv;
		if (sb < 4) {
			scv = sc[sb] & 63;
			mv = sc[sb + 4] & 63;
		} else {
			scv = (sc[sb + 4] & 15) | ((sc[sb - 4] >> 6) << 4);
			mv = (sc[sb + 4] >> 4) | ((sc[sb] >> 6) << 4);
		}
		float d1 = d * float(scv), m1 = dmin * float(mv);
		device const uchar *q = blk + (five ? 48 : 16) + 32 * (sb / 2) + v % 32;
		device const uchar *qh = blk + 16 + v % 32;
		for (uint i = 0; i < 8; i++) {
			uint x = (sb & 1) != 0 ? (q[i] >> 4) : (q[i] & 15);
			if (five && ((qh[i] >> sb) & 1) != 0) x += 16;
			w[i] = d1 * float(x) - m1;
		}
		break;
	}
	case FMT_Q6_K: { // super-blocks of 256: 128 bytes ql, 64 qh, 16 int8 scales, f16 d
		device const uchar *blk = row + (j0 / 256) * 210;
		float d = f16_to_f32(load_u16(blk + 208));
		uint v = j0 % 256, n = v / 128, r = v % 128, g = r / 32, l0 = r % 32;
		device const uchar *ql = blk + 64 * n + 32 * (g & 1) + l0;
		device const uchar *qh = blk + 128 + 32 * n + l0;
		float dd = d * float(((device const char *)(blk + 192))[8 * n + l0 / 16 + 2 * g]);
		for (uint i = 0; i < 8; i++) {
			uint lo = g < 2 ? (ql[i] & 15) : (ql[i] >> 4);
			uint hi = (qh[i] >> (2 * g)) & 3;
			w[i] = dd * float(int(lo | (hi << 4)) - 32);
		}
		break;
	}
	default: { // FMT_MLX
		uint g = j0 / wp.group;
		uint gi = r * (wp.cols / wp.group) + g;
		float s = load_scalar(S, wp.sfmt, gi);
		float bias = load_scalar(B, wp.bfmt, gi);
		if (wp.bits == 8) {
			for (uint i = 0; i < 8; i++) w[i] = s * float(row[j0 + i]) + bias;
		} else {
			device const uchar *p = row + j0 / 2;
			for (uint i = 0; i < 4; i++) {
				uchar b = p[i];
				w[2 * i] = s * float(b & 15) + bias;
				w[2 * i + 1] = s * float(b >> 4) + bias;
			}
		}
		break;
	}
	}
}

#endif
