// Fused kernels: one dispatch where the dense path would take two, each with
// the bits of the dispatches it replaces (the same expressions in the same
// order; metal/fuse.go decides when to use them and the tests compare bits).
// Also the embedding of token ids that stay on the device (engine.DeviceTokenOps).
#include "common.h"

struct FMatMulParams {
	uint M, N, K;
	uint has_bias;
};

struct FNormParams {
	uint rows, cols, dim;
	float eps, offset;
};

#define FM_SG 4 // = MM_SG: SIMD-groups per threadgroup, one weight row each
#define FM_MB 8 // = MM_MB: x rows per threadgroup

// rmsnorm_matmul: h = rmsnorm(x) (whole rows: dim = K) and
// dst = h·Wᵀ (+ bias) in one dispatch. Every SIMD-group computes the inverse
// RMS of its rows as rmsnorm does (32 lanes, lane-strided squares, simd_sum)
// and normalises each x value with rmsnorm's expression before matmul's
// product, so h and dst have the bits of rmsnorm followed by matmul. The
// SIMD-groups of threadgroup column 0, SIMD-group 0, also write h for the
// ops after the matmul that read it. x and h must not alias. Grid and
// threads as matmul; M ≤ FM_MB per threadgroup row.
kernel void rmsnorm_matmul(device float *dst [[buffer(0)]],
                           device const float *x [[buffer(1)]],
                           device const uchar *W [[buffer(2)]],
                           device const uchar *S [[buffer(3)]],
                           device const uchar *B [[buffer(4)]],
                           constant WeightParams &wp [[buffer(5)]],
                           device const float *bias [[buffer(6)]],
                           constant FMatMulParams &p [[buffer(7)]],
                           device float *h [[buffer(8)]],
                           device const float *nw [[buffer(9)]],
                           constant FNormParams &np [[buffer(10)]],
                           uint2 tg [[threadgroup_position_in_grid]],
                           uint sg [[simdgroup_index_in_threadgroup]],
                           uint lane [[thread_index_in_simdgroup]]) {
	uint n = tg.x * FM_SG + sg;
	uint m0 = tg.y * FM_MB;
	if (n >= p.N) return; // the whole SIMD-group leaves together
	uint mc = min(uint(FM_MB), p.M - m0);
	float inv[FM_MB];
	for (uint m = 0; m < mc; m++) {
		ulong base = ulong(m0 + m) * p.K;
		float ss = 0.0f;
		for (uint i = lane; i < p.K; i += 32) {
			float v = x[base + i];
			ss += v * v;
		}
		ss = simd_sum(ss);
		inv[m] = 1.0f / sqrt(ss / float(np.dim) + np.eps);
		if (tg.x == 0 && sg == 0) {
			for (uint i = lane; i < p.K; i += 32) h[base + i] = (np.offset + nw[i]) * (x[base + i] * inv[m]);
		}
	}
	float acc[FM_MB];
	for (uint m = 0; m < FM_MB; m++) acc[m] = 0.0f;
	uint chunks = p.K / 8;
	for (uint c = lane; c < chunks; c += 32) {
		float w[8];
		load8(W, S, B, wp, n, c, w);
		for (uint m = 0; m < mc; m++) {
			device const float *xr = x + ulong(m0 + m) * p.K + 8 * c;
			float s = 0.0f;
			for (uint k = 0; k < 8; k++) {
				float xn = (np.offset + nw[8 * c + k]) * (xr[k] * inv[m]);
				s += w[k] * xn;
			}
			acc[m] += s;
		}
	}
	for (uint m = 0; m < mc; m++) {
		float s = simd_sum(acc[m]);
		if (lane == 0) dst[ulong(m0 + m) * p.N + n] = s + (p.has_bias != 0 ? bias[n] : 0.0f);
	}
}

// matmul_add: dst = x·Wᵀ (+ bias) as matmul, then res = a + b as add, where
// one of a, b is dst (a residual add of the product): each output element
// is written and re-read by the lane that computed it, so res may alias a
// or b. Grid and threads as matmul.
kernel void matmul_add(device float *dst [[buffer(0)]],
                       device const float *x [[buffer(1)]],
                       device const uchar *W [[buffer(2)]],
                       device const uchar *S [[buffer(3)]],
                       device const uchar *B [[buffer(4)]],
                       constant WeightParams &wp [[buffer(5)]],
                       device const float *bias [[buffer(6)]],
                       constant FMatMulParams &p [[buffer(7)]],
                       device float *res [[buffer(8)]],
                       device const float *a [[buffer(9)]],
                       device const float *b [[buffer(10)]],
                       uint2 tg [[threadgroup_position_in_grid]],
                       uint sg [[simdgroup_index_in_threadgroup]],
                       uint lane [[thread_index_in_simdgroup]]) {
	uint n = tg.x * FM_SG + sg;
	uint m0 = tg.y * FM_MB;
	if (n >= p.N) return; // the whole SIMD-group leaves together
	uint mc = min(uint(FM_MB), p.M - m0);
	float acc[FM_MB];
	for (uint m = 0; m < FM_MB; m++) acc[m] = 0.0f;
	uint chunks = p.K / 8;
	for (uint c = lane; c < chunks; c += 32) {
		float w[8];
		load8(W, S, B, wp, n, c, w);
		for (uint m = 0; m < mc; m++) {
			device const float *xr = x + ulong(m0 + m) * p.K + 8 * c;
			float s = 0.0f;
			for (uint k = 0; k < 8; k++) s += w[k] * xr[k];
			acc[m] += s;
		}
	}
	for (uint m = 0; m < mc; m++) {
		float s = simd_sum(acc[m]);
		if (lane == 0) {
			ulong i = ulong(m0 + m) * p.N + n;
			dst[i] = s + (p.has_bias != 0 ? bias[n] : 0.0f);
			res[i] = a[i] + b[i];
		}
	}
}

struct EmbedRefParams {
	uint n;    // number of rows
	uint cols; // hidden size (multiple of 8)
	uint vocab;
};

// embed_ref: as embed, but ids[i] ≥ 0 is a token id and ids[i] < 0 names
// entry -1-ids[i] of tok, a device buffer of token ids an earlier dispatch
// (argmax) wrote: the id of a greedy step never visits the CPU. An id out
// of range (argmax of NaN logits writes 0xffffffff; the host reports that
// error when it reads the ids) embeds row 0 instead of reading past the
// table. grid (ceil(cols/8/64), n), 64 threads.
kernel void embed_ref(device float *dst [[buffer(0)]],
                      device const uchar *W [[buffer(1)]],
                      device const uchar *S [[buffer(2)]],
                      device const uchar *B [[buffer(3)]],
                      constant WeightParams &wp [[buffer(4)]],
                      device const int *ids [[buffer(5)]],
                      device const int *tok [[buffer(6)]],
                      constant EmbedRefParams &p [[buffer(7)]],
                      uint2 gid [[thread_position_in_grid]]) {
	uint c = gid.x, i = gid.y;
	if (i >= p.n || c >= p.cols / 8) return;
	int id = ids[i];
	if (id < 0) id = tok[-1 - id];
	if (id < 0 || uint(id) >= p.vocab) id = 0;
	float w[8];
	load8(W, S, B, wp, uint(id), c, w);
	for (uint k = 0; k < 8; k++) dst[ulong(i) * p.cols + 8 * c + k] = w[k];
}

struct NormRopeParams {
	uint rows, heads, head_dim, half_rot;
	float attn_factor;
	float eps, offset;
};

// rmsnorm_rope: x = rope(rmsnorm(x)) in place, per head (QK-norm, then the
// rotary embedding of a query or key row): the SIMD-group of (head, row)
// sums the head's squares as rmsnorm does (32 lanes, lane-strided,
// simd_sum), normalises each value with rmsnorm's expression and rotates
// the pairs (i, i + half_rot) with rope's expressions, so the bits are
// those of rmsnorm followed by rope. The lane of pair i is the only reader
// and writer of values i and i + half_rot; values past the rotary part
// are only normalised. grid (heads, rows), 32 threads.
kernel void rmsnorm_rope(device float *x [[buffer(0)]],
                         device const float *w [[buffer(1)]],
                         device const int *pos [[buffer(2)]],
                         device const float *inv_freq [[buffer(3)]],
                         constant NormRopeParams &p [[buffer(4)]],
                         uint2 tg [[threadgroup_position_in_grid]],
                         uint lane [[thread_index_in_simdgroup]]) {
	uint h = tg.x, r = tg.y;
	if (h >= p.heads || r >= p.rows) return;
	device float *v = x + (ulong(r) * p.heads + h) * p.head_dim;
	float ss = 0.0f;
	for (uint i = lane; i < p.head_dim; i += 32) {
		float e = v[i];
		ss += e * e;
	}
	ss = simd_sum(ss);
	float inv = 1.0f / sqrt(ss / float(p.head_dim) + p.eps);
	for (uint i = lane; i < p.head_dim; i += 32) {
		if (i < p.half_rot) {
			float x1 = (p.offset + w[i]) * (v[i] * inv);
			float x2 = (p.offset + w[i + p.half_rot]) * (v[i + p.half_rot] * inv);
			float a = float(pos[r]) * inv_freq[i];
			float c = precise::cos(a) * p.attn_factor, s = precise::sin(a) * p.attn_factor;
			v[i] = x1 * c - x2 * s;
			v[i + p.half_rot] = x2 * c + x1 * s;
		} else if (i >= 2 * p.half_rot) {
			v[i] = (p.offset + w[i]) * (v[i] * inv);
		}
	}
}

struct MultiParams {
	uint M, K, count; // rows of x, its width, matrices (1-4)
	uint norm;        // x is normalised on the fly (FNormParams np), h written
	uint N[4];
	uint has_bias[4];
	uint split; // > 0: d0's rows are also deinterleaved into sa, sb in chunks of split
};

// matmul_multi: up to four matmuls of one x (dst_j = x·W_jᵀ + bias_j: the q,
// k and v projections of a layer, a linear-attention layer's four) in one
// dispatch, optionally after the norm that produced x (as rmsnorm_matmul).
// Global row n of the grid is row n - (N_0 + … + N_{j-1}) of matrix j; each
// SIMD-group computes its row exactly as matmul (or rmsnorm_matmul) does, so
// every output has their bits. Grid (ceil(ΣN/FM_SG), ceil(M/FM_MB)), 32*FM_SG
// threads; M ≤ FM_MB when norm is set.
kernel void matmul_multi(device float *d0 [[buffer(0)]],
                         device float *d1 [[buffer(1)]],
                         device float *d2 [[buffer(2)]],
                         device float *d3 [[buffer(3)]],
                         device const float *x [[buffer(4)]],
                         device const uchar *W0 [[buffer(5)]],
                         device const uchar *S0 [[buffer(6)]],
                         device const uchar *B0 [[buffer(7)]],
                         device const uchar *W1 [[buffer(8)]],
                         device const uchar *S1 [[buffer(9)]],
                         device const uchar *B1 [[buffer(10)]],
                         device const uchar *W2 [[buffer(11)]],
                         device const uchar *S2 [[buffer(12)]],
                         device const uchar *B2 [[buffer(13)]],
                         device const uchar *W3 [[buffer(14)]],
                         device const uchar *S3 [[buffer(15)]],
                         device const uchar *B3 [[buffer(16)]],
                         constant WeightParams &wp0 [[buffer(17)]],
                         constant WeightParams &wp1 [[buffer(18)]],
                         constant WeightParams &wp2 [[buffer(19)]],
                         constant WeightParams &wp3 [[buffer(20)]],
                         device const float *bias0 [[buffer(21)]],
                         device const float *bias1 [[buffer(22)]],
                         device const float *bias2 [[buffer(23)]],
                         device const float *bias3 [[buffer(24)]],
                         constant MultiParams &p [[buffer(25)]],
                         device float *h [[buffer(26)]],
                         device const float *nw [[buffer(27)]],
                         constant FNormParams &np [[buffer(28)]],
                         device float *sa [[buffer(29)]],
                         device float *sb [[buffer(30)]],
                         uint2 tg [[threadgroup_position_in_grid]],
                         uint sg [[simdgroup_index_in_threadgroup]],
                         uint lane [[thread_index_in_simdgroup]]) {
	uint n = tg.x * FM_SG + sg;
	uint j = 0;
	while (j < p.count && n >= p.N[j]) {
		n -= p.N[j];
		j++;
	}
	if (j >= p.count) return; // the whole SIMD-group leaves together
	device float *dst = j == 0 ? d0 : j == 1 ? d1 : j == 2 ? d2 : d3;
	device const uchar *W = j == 0 ? W0 : j == 1 ? W1 : j == 2 ? W2 : W3;
	device const uchar *S = j == 0 ? S0 : j == 1 ? S1 : j == 2 ? S2 : S3;
	device const uchar *B = j == 0 ? B0 : j == 1 ? B1 : j == 2 ? B2 : B3;
	constant WeightParams &wp = j == 0 ? wp0 : j == 1 ? wp1 : j == 2 ? wp2 : wp3;
	device const float *bias = j == 0 ? bias0 : j == 1 ? bias1 : j == 2 ? bias2 : bias3;
	uint N = p.N[j];
	uint m0 = tg.y * FM_MB;
	uint mc = min(uint(FM_MB), p.M - m0);
	float inv[FM_MB];
	for (uint m = 0; m < FM_MB; m++) inv[m] = 1.0f;
	if (p.norm != 0) {
		for (uint m = 0; m < mc; m++) {
			ulong base = ulong(m0 + m) * p.K;
			float ss = 0.0f;
			for (uint i = lane; i < p.K; i += 32) {
				float v = x[base + i];
				ss += v * v;
			}
			ss = simd_sum(ss);
			inv[m] = 1.0f / sqrt(ss / float(np.dim) + np.eps);
			if (tg.x == 0 && sg == 0) {
				for (uint i = lane; i < p.K; i += 32) h[base + i] = (np.offset + nw[i]) * (x[base + i] * inv[m]);
			}
		}
	}
	float acc[FM_MB];
	for (uint m = 0; m < FM_MB; m++) acc[m] = 0.0f;
	uint chunks = p.K / 8;
	for (uint c = lane; c < chunks; c += 32) {
		float w[8];
		load8(W, S, B, wp, n, c, w);
		for (uint m = 0; m < mc; m++) {
			device const float *xr = x + ulong(m0 + m) * p.K + 8 * c;
			float s = 0.0f;
			if (p.norm != 0) {
				for (uint k = 0; k < 8; k++) {
					float xn = (np.offset + nw[8 * c + k]) * (xr[k] * inv[m]);
					s += w[k] * xn;
				}
			} else {
				for (uint k = 0; k < 8; k++) s += w[k] * xr[k];
			}
			acc[m] += s;
		}
	}
	for (uint m = 0; m < mc; m++) {
		float s = simd_sum(acc[m]);
		if (lane == 0) {
			float y = s + (p.has_bias[j] != 0 ? bias[n] : 0.0f);
			dst[ulong(m0 + m) * N + n] = y;
			if (j == 0 && p.split != 0) { // deinterleave's copies of value n
				uint hh = n / (2 * p.split), i = n - hh * 2 * p.split;
				ulong r = ulong(m0 + m) * (N / 2) + hh * p.split;
				if (i < p.split) sa[r + i] = y;
				else sb[r + i - p.split] = y;
			}
		}
	}
}

struct FConvParams {
	uint row, n, C, K;
	uint fresh;
};

// dn_conv_both: dn_conv and dn_conv_state of one sequence in one dispatch:
// thread gid computes conv output gid (< n*C) and new state value gid
// (< (K-1)*C) with those kernels' expressions; u and to are written, x and
// from only read, so the two parts do not interact. 1-D grid of 256-thread
// groups over max(n, K-1)*C.
kernel void dn_conv_both(device float *u [[buffer(0)]],
                         device float *to [[buffer(1)]],
                         device const float *x [[buffer(2)]],
                         device const float *w [[buffer(3)]],
                         device const float *from [[buffer(4)]],
                         constant FConvParams &p [[buffer(5)]],
                         uint gid [[thread_position_in_grid]]) {
	if (gid < p.n * p.C) {
		uint t = gid / p.C, c = gid % p.C;
		float s = 0.0f;
		for (uint j = 0; j < p.K; j++) {
			int src = int(t) - int(p.K - 1) + int(j);
			float v;
			if (src >= 0) v = x[ulong(p.row + uint(src)) * p.C + c];
			else v = p.fresh != 0 ? 0.0f : from[ulong(int(p.K - 1) + src) * p.C + c];
			s += w[c * p.K + j] * v;
		}
		u[ulong(t) * p.C + c] = s / (1.0f + exp(-s));
	}
	if (gid < (p.K - 1) * p.C) {
		uint s = gid / p.C, c = gid % p.C;
		uint i = p.n + s; // index into old state ++ x
		float v;
		if (i < p.K - 1) v = p.fresh != 0 ? 0.0f : from[ulong(i) * p.C + c];
		else v = x[ulong(p.row + i - (p.K - 1)) * p.C + c];
		to[ulong(s) * p.C + c] = v;
	}
}

struct FDNStepParams {
	uint row, n, C, K;
	uint fresh;
	uint nk, nv, dk, dv;
	float eps;
};

#define FDN_MAXK 256 // key_dim bound (dn_rule's DN_MAXK * 32)
#define FDN_MAXV 256 // value_dim bound: one thread per value column

// fdn_conv: dn_conv's output value of channel c at token t (its expression).
inline float fdn_conv(device const float *x, device const float *w, device const float *from, constant FDNStepParams &p, uint t, uint c) {
	float s = 0.0f;
	for (uint j = 0; j < p.K; j++) {
		int src = int(t) - int(p.K - 1) + int(j);
		float v;
		if (src >= 0) v = x[ulong(p.row + uint(src)) * p.C + c];
		else v = p.fresh != 0 ? 0.0f : from[ulong(int(p.K - 1) + src) * p.C + c];
		s += w[c * p.K + j] * v;
	}
	return s / (1.0f + exp(-s));
}

// fdn_conv_state: dn_conv_state's new state value (s, c).
inline void fdn_conv_state(device float *to, device const float *x, device const float *from, constant FDNStepParams &p, uint s, uint c) {
	uint i = p.n + s; // index into old state ++ x
	float v;
	if (i < p.K - 1) v = p.fresh != 0 ? 0.0f : from[ulong(i) * p.C + c];
	else v = x[ulong(p.row + i - (p.K - 1)) * p.C + c];
	to[ulong(s) * p.C + c] = v;
}

// dn_step: the decode chain of one sequence's Gated DeltaNet layer —
// dn_conv_both, dn_rule and dn_gated_norm — in one dispatch. Grid (nv),
// 32*ceil(dv/32) threads: thread j owns value column j of head h for the
// whole head, so the gated norm's row sum is in the threadgroup. Per token
// the conv outputs that head h reads (its key head's q and k, its own v
// columns) are recomputed with dn_conv's expression into threadgroup
// memory; the rule is dn_rule's and the norm dn_gated_norm's (every
// SIMD-group sums the squares lane-strided as its 32 threads do), so o has
// their bits. The new conv state: each head writes its v channels, the
// first value head of each key head that key head's q and k channels.
// For decode (few tokens): the conv is recomputed per value head.
kernel void dn_step(device float *o [[buffer(0)]],
                    device const float *x [[buffer(1)]],
                    device const float *z [[buffer(2)]],
                    device const float *cw [[buffer(3)]],
                    device const float *cfrom [[buffer(4)]],
                    device float *cto [[buffer(5)]],
                    device const float *bt [[buffer(6)]],
                    device const float *at [[buffer(7)]],
                    device const float *a_log [[buffer(8)]],
                    device const float *dt_bias [[buffer(9)]],
                    device const float *S_from [[buffer(10)]],
                    device float *S_to [[buffer(11)]],
                    device const float *nw [[buffer(12)]],
                    constant FDNStepParams &p [[buffer(13)]],
                    uint2 tg [[threadgroup_position_in_grid]],
                    uint tid [[thread_index_in_threadgroup]],
                    uint lane [[thread_index_in_simdgroup]]) {
	TG_MEM float qk[2 * FDN_MAXK];
	TG_MEM float ob[FDN_MAXV];
	uint h = tg.x;
	uint nth = (p.dv + 31) / 32 * 32;
	uint j = tid;
	bool own = j < p.dv;
	uint kh = h / (p.nv / p.nk);
	uint kd = p.nk * p.dk;
	uint vc = 2 * kd + h * p.dv + j; // this thread's v channel
	// The new conv state (dn_conv_state's values).
	for (uint s = 0; s + 1 < p.K; s++) {
		if (own) fdn_conv_state(cto, x, cfrom, p, s, vc);
		if (h % (p.nv / p.nk) == 0) {
			for (uint i = tid; i < 2 * p.dk; i += nth) {
				uint c = i < p.dk ? kh * p.dk + i : kd + kh * p.dk + (i - p.dk);
				fdn_conv_state(cto, x, cfrom, p, s, c);
			}
		}
	}
	ulong sbase = ulong(h) * p.dk * p.dv;
	if (own) {
		for (uint i = 0; i < p.dk; i++) {
			ulong si = sbase + ulong(i) * p.dv + j;
			S_to[si] = p.fresh != 0 ? 0.0f : S_from[si];
		}
	}
	float A = -exp(a_log[h]);
	float qscale = 1.0f / sqrt(float(p.dk));
	for (uint t = 0; t < p.n; t++) {
		for (uint i = tid; i < 2 * p.dk; i += nth) {
			uint c = i < p.dk ? kh * p.dk + i : kd + kh * p.dk + (i - p.dk);
			qk[i] = fdn_conv(x, cw, cfrom, p, t, c);
		}
		float v = own ? fdn_conv(x, cw, cfrom, p, t, vc) : 0.0f;
		threadgroup_barrier(mem_flags::mem_threadgroup);
		threadgroup const float *q = qk;
		threadgroup const float *k = qk + p.dk;
		float qq = 0.0f, kk = 0.0f;
		for (uint i = lane; i < p.dk; i += 32) {
			qq += q[i] * q[i];
			kk += k[i] * k[i];
		}
		qq = simd_sum(qq);
		kk = simd_sum(kk);
		float qs = qscale / sqrt(qq + 1e-6f);
		float ks = 1.0f / sqrt(kk + 1e-6f);
		ulong gi = ulong(p.row + t) * p.nv + h;
		float beta = 1.0f / (1.0f + exp(-bt[gi]));
		float xa = at[gi] + dt_bias[h];
		float sp = softplus(xa);
		float decay = exp(A * sp);
		if (own) {
			float m = 0.0f;
			for (uint i = 0; i < p.dk; i++) m += S_to[sbase + ulong(i) * p.dv + j] * decay * (k[i] * ks);
			float d = (v - m) * beta;
			float out = 0.0f;
			for (uint i = 0; i < p.dk; i++) {
				ulong si = sbase + ulong(i) * p.dv + j;
				float s = S_to[si] * decay + (k[i] * ks) * d;
				S_to[si] = s;
				out += s * (q[i] * qs);
			}
			ob[j] = out;
		}
		threadgroup_barrier(mem_flags::mem_threadgroup);
		// dn_gated_norm of row t, head h.
		float ss = 0.0f;
		for (uint jj = lane; jj < p.dv; jj += 32) ss += ob[jj] * ob[jj];
		ss = simd_sum(ss);
		float inv = 1.0f / sqrt(ss / float(p.dv) + p.eps);
		if (own) {
			ulong oi = ulong(p.row + t) * p.nv * p.dv + h * p.dv + j;
			float zz = z[oi];
			o[oi] = nw[j] * (ob[j] * inv) * (zz / (1.0f + exp(-zz)));
		}
		threadgroup_barrier(mem_flags::mem_threadgroup);
	}
}

struct NormRopeKVParams {
	uint pos, dim; // cache position of row 0; values per cache row
};

// rmsnorm_rope_kv: the key's rmsnorm_rope with store_kv as its epilogue:
// each value of the rotated key is written to x (in place, as
// rmsnorm_rope) and to the K cache row pos + r, and the lane copies the
// same values of v to the V cache (store_kv's copies). One sequence whose
// rows are all of x; grid (heads, rows), 32 threads.
kernel void rmsnorm_rope_kv(device float *x [[buffer(0)]],
                            device const float *w [[buffer(1)]],
                            device const int *pos [[buffer(2)]],
                            device const float *inv_freq [[buffer(3)]],
                            constant NormRopeParams &p [[buffer(4)]],
                            device float *kc [[buffer(5)]],
                            device float *vc [[buffer(6)]],
                            device const float *vv [[buffer(7)]],
                            constant NormRopeKVParams &kp [[buffer(8)]],
                            uint2 tg [[threadgroup_position_in_grid]],
                            uint lane [[thread_index_in_simdgroup]]) {
	uint h = tg.x, r = tg.y;
	if (h >= p.heads || r >= p.rows) return;
	ulong off = (ulong(r) * p.heads + h) * p.head_dim;
	device float *v = x + off;
	device float *kr = kc + ulong(kp.pos + r) * kp.dim + h * p.head_dim;
	device float *vr = vc + ulong(kp.pos + r) * kp.dim + h * p.head_dim;
	float ss = 0.0f;
	for (uint i = lane; i < p.head_dim; i += 32) {
		float e = v[i];
		ss += e * e;
	}
	ss = simd_sum(ss);
	float inv = 1.0f / sqrt(ss / float(p.head_dim) + p.eps);
	for (uint i = lane; i < p.head_dim; i += 32) {
		if (i < p.half_rot) {
			float x1 = (p.offset + w[i]) * (v[i] * inv);
			float x2 = (p.offset + w[i + p.half_rot]) * (v[i + p.half_rot] * inv);
			float a = float(pos[r]) * inv_freq[i];
			float c = precise::cos(a) * p.attn_factor, s = precise::sin(a) * p.attn_factor;
			float y1 = x1 * c - x2 * s, y2 = x2 * c + x1 * s;
			v[i] = y1;
			v[i + p.half_rot] = y2;
			kr[i] = y1;
			kr[i + p.half_rot] = y2;
		} else if (i >= 2 * p.half_rot) {
			float y = (p.offset + w[i]) * (v[i] * inv);
			v[i] = y;
			kr[i] = y;
		}
	}
	for (uint i = lane; i < p.head_dim; i += 32) vr[i] = vv[off + i];
}
