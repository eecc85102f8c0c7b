// Kernels of the dense Qwen path (Qwen2/Qwen3): embedding, matmul, RMSNorm,
// rotary, KV store, causal GQA attention, element-wise ops, copies.
// Conventions: activations are float32 row-major; weights are raw checkpoint
// bytes described by WeightParams; every kernel bounds-checks so grids may be
// rounded up to whole threadgroups.
#include "common.h"

// ---- embedding ----
struct EmbedParams {
	uint n;    // number of ids
	uint cols; // hidden size (multiple of 8)
};

// embed: grid (ceil(cols/8/64), n), 64 threads; thread decodes 8 values.
kernel void embed(device float *dst [[buffer(0)]],
                  device const uchar *W [[buffer(1)]],
                  device const uchar *S [[buffer(2)]],
                  device const uchar *B [[buffer(3)]],
                  constant WeightParams &wp [[buffer(4)]],
                  device const int *ids [[buffer(5)]],
                  constant EmbedParams &p [[buffer(6)]],
                  uint2 gid [[thread_position_in_grid]]) {
	uint c = gid.x, i = gid.y;
	if (i >= p.n || c >= p.cols / 8) return;
	float w[8];
	load8(W, S, B, wp, uint(ids[i]), c, w);
	for (uint k = 0; k < 8; k++) dst[ulong(i) * p.cols + 8 * c + k] = w[k];
}

// ---- matmul: dst[M,N] = x[M,K] · W[N,K]^T (+ bias) ----
struct MatMulParams {
	uint M, N, K;
	uint has_bias;
};

#define MM_SG 4 // SIMD-groups per threadgroup: one weight row each
#define MM_MB 8 // x rows per threadgroup

// matmul: grid (ceil(N/MM_SG), ceil(M/MM_MB)), 32*MM_SG threads. Each
// SIMD-group owns one weight row; each lane decodes chunks of 8 weights once
// and multiplies them with up to MM_MB rows of x; simd_sum reduces.
kernel void matmul(device float *dst [[buffer(0)]],
                   device const float *x [[buffer(1)]],
                   device const uchar *W [[buffer(2)]],
                   device const uchar *S [[buffer(3)]],
                   device const uchar *B [[buffer(4)]],
                   constant WeightParams &wp [[buffer(5)]],
                   device const float *bias [[buffer(6)]],
                   constant MatMulParams &p [[buffer(7)]],
                   uint2 tg [[threadgroup_position_in_grid]],
                   uint sg [[simdgroup_index_in_threadgroup]],
                   uint lane [[thread_index_in_simdgroup]]) {
	uint n = tg.x * MM_SG + sg;
	uint m0 = tg.y * MM_MB;
	if (n >= p.N) return; // the whole SIMD-group leaves together
	uint mc = min(uint(MM_MB), p.M - m0);
	float acc[MM_MB];
	for (uint m = 0; m < MM_MB; m++) acc[m] = 0.0f;
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
		if (lane == 0) dst[ulong(m0 + m) * p.N + n] = s + (p.has_bias != 0 ? bias[n] : 0.0f);
	}
}

// matmul_gate_up: dst = silu(x·Gᵀ) * (x·Uᵀ), two matrices stored alike
// (an MLP's gate and up projections) in one dispatch. Each product is summed
// as matmul sums it (+ 0.0f: matmul's absent bias) and SwiGLU is swiglu's
// expression, so the result has the bits of two matmuls and a swiglu. Grid
// and threads as matmul.
kernel void matmul_gate_up(device float *dst [[buffer(0)]],
                           device const float *x [[buffer(1)]],
                           device const uchar *GW [[buffer(2)]],
                           device const uchar *GS [[buffer(3)]],
                           device const uchar *GB [[buffer(4)]],
                           device const uchar *UW [[buffer(5)]],
                           device const uchar *US [[buffer(6)]],
                           device const uchar *UB [[buffer(7)]],
                           constant WeightParams &wp [[buffer(8)]],
                           constant MatMulParams &p [[buffer(9)]],
                           uint2 tg [[threadgroup_position_in_grid]],
                           uint sg [[simdgroup_index_in_threadgroup]],
                           uint lane [[thread_index_in_simdgroup]]) {
	uint n = tg.x * MM_SG + sg;
	uint m0 = tg.y * MM_MB;
	if (n >= p.N) return; // the whole SIMD-group leaves together
	uint mc = min(uint(MM_MB), p.M - m0);
	float ag[MM_MB], au[MM_MB];
	for (uint m = 0; m < MM_MB; m++) ag[m] = au[m] = 0.0f;
	uint chunks = p.K / 8;
	for (uint c = lane; c < chunks; c += 32) {
		float w[8];
		load8(GW, GS, GB, wp, n, c, w);
		for (uint m = 0; m < mc; m++) {
			device const float *xr = x + ulong(m0 + m) * p.K + 8 * c;
			float s = 0.0f;
			for (uint k = 0; k < 8; k++) s += w[k] * xr[k];
			ag[m] += s;
		}
		load8(UW, US, UB, wp, n, c, w);
		for (uint m = 0; m < mc; m++) {
			device const float *xr = x + ulong(m0 + m) * p.K + 8 * c;
			float s = 0.0f;
			for (uint k = 0; k < 8; k++) s += w[k] * xr[k];
			au[m] += s;
		}
	}
	for (uint m = 0; m < mc; m++) {
		float g = simd_sum(ag[m]) + 0.0f;
		float u = simd_sum(au[m]) + 0.0f;
		if (lane == 0) dst[ulong(m0 + m) * p.N + n] = g / (1.0f + exp(-g)) * u;
	}
}

// ---- RMSNorm over chunks of dim values ----
struct NormParams {
	uint rows, cols, dim;
	float eps, offset;
};

// rmsnorm: grid (cols/dim, rows), 32 threads (one SIMD-group per chunk).
kernel void rmsnorm(device float *dst [[buffer(0)]],
                    device const float *x [[buffer(1)]],
                    device const float *w [[buffer(2)]],
                    constant NormParams &p [[buffer(3)]],
                    uint2 tg [[threadgroup_position_in_grid]],
                    uint lane [[thread_index_in_simdgroup]]) {
	ulong base = ulong(tg.y) * p.cols + ulong(tg.x) * p.dim;
	float ss = 0.0f;
	for (uint i = lane; i < p.dim; i += 32) {
		float v = x[base + i];
		ss += v * v;
	}
	ss = simd_sum(ss);
	float inv = 1.0f / sqrt(ss / float(p.dim) + p.eps);
	for (uint i = lane; i < p.dim; i += 32) dst[base + i] = (p.offset + w[i]) * (x[base + i] * inv);
}

// ---- rotary (rotate_half / NeoX layout, partial rotary) ----
struct RopeParams {
	uint rows, heads, head_dim, half_rot;
	float attn_factor; // multiplies cos and sin (YaRN; 1 otherwise)
};

// rope: one thread per (row, head, i < half_rot); 1-D grid of 256-thread groups.
kernel void rope(device float *x [[buffer(0)]],
                 device const int *pos [[buffer(1)]],
                 device const float *inv_freq [[buffer(2)]],
                 constant RopeParams &p [[buffer(3)]],
                 uint gid [[thread_position_in_grid]]) {
	uint i = gid % p.half_rot;
	uint h = (gid / p.half_rot) % p.heads;
	uint r = gid / (p.half_rot * p.heads);
	if (r >= p.rows) return;
	// float32 angle as HF computes it, then an accurate cos/sin.
	float a = float(pos[r]) * inv_freq[i];
	float c = precise::cos(a) * p.attn_factor, s = precise::sin(a) * p.attn_factor;
	device float *v = x + ulong(r) * p.heads * p.head_dim + h * p.head_dim;
	float x1 = v[i], x2 = v[i + p.half_rot];
	v[i] = x1 * c - x2 * s;
	v[i + p.half_rot] = x2 * c + x1 * s;
}

// ---- KV cache store: rows [row, row+n) of k, v → cache positions [pos, pos+n) ----
struct StoreParams {
	uint row, n, pos, dim;
};

kernel void store_kv(device float *kc [[buffer(0)]],
                     device float *vc [[buffer(1)]],
                     device const float *k [[buffer(2)]],
                     device const float *v [[buffer(3)]],
                     constant StoreParams &p [[buffer(4)]],
                     uint gid [[thread_position_in_grid]]) {
	if (gid >= p.n * p.dim) return;
	uint i = gid / p.dim, d = gid % p.dim;
	ulong src = ulong(p.row + i) * p.dim + d, dstI = ulong(p.pos + i) * p.dim + d;
	kc[dstI] = k[src];
	vc[dstI] = v[src];
}

// ---- causal GQA attention over one sequence's cache ----
struct AttnParams {
	uint row, n, pos;       // rows [row, row+n) at positions [pos, pos+n)
	uint heads, kv_heads, head_dim;
	float scale;
};

#define ATT_MAXD 8 // head_dim <= 256: values per lane

// attention: grid (heads, n), 32 threads. The SIMD-group walks the cache in
// blocks of 32 positions: lane l scores position base+l, the block's max and
// sum update an online softmax, and each lane accumulates its own output
// dimensions (lane + 32j) from the block's weights in threadgroup memory.
// attention_head: the body of attention (one head of one row); with gate,
// the output is then multiplied by sigmoid(gate) as sigmoid_mul computes it
// (attention_gated: the output gate of gated attention as its epilogue).
inline void attention_head(device float *dst, device const float *q, device const float *kc, device const float *vc,
                           constant AttnParams &p, device const float *gate, threadgroup float *pw, uint2 tg, uint lane) {
	uint h = tg.x, i = tg.y;
	uint kvh = h / (p.heads / p.kv_heads);
	uint kdim = p.kv_heads * p.head_dim;
	uint npos = p.pos + i + 1;
	device const float *qr = q + ulong(p.row + i) * p.heads * p.head_dim + h * p.head_dim;
	float m = NEG_BIG, l = 0.0f;
	float acc[ATT_MAXD];
	for (uint j = 0; j < ATT_MAXD; j++) acc[j] = 0.0f;
	for (uint base = 0; base < npos; base += 32) {
		uint t = base + lane;
		float s = NEG_BIG;
		if (t < npos) {
			device const float *kr = kc + ulong(t) * kdim + kvh * p.head_dim;
			float d = 0.0f;
			for (uint e = 0; e < p.head_dim; e++) d += qr[e] * kr[e];
			s = d * p.scale;
		}
		float mn = max(m, simd_max(s));
		float corr = exp(m - mn);
		float e = t < npos ? exp(s - mn) : 0.0f;
		l = l * corr + simd_sum(e);
		pw[lane] = e;
		threadgroup_barrier(mem_flags::mem_threadgroup);
		uint cnt = min(32u, npos - base);
		for (uint j = 0; j < ATT_MAXD; j++) {
			uint d = lane + 32 * j;
			if (d >= p.head_dim) break;
			float a = acc[j] * corr;
			for (uint u = 0; u < cnt; u++) a += pw[u] * vc[ulong(base + u) * kdim + kvh * p.head_dim + d];
			acc[j] = a;
		}
		threadgroup_barrier(mem_flags::mem_threadgroup);
		m = mn;
	}
	device float *o = dst + ulong(p.row + i) * p.heads * p.head_dim + h * p.head_dim;
	for (uint j = 0; j < ATT_MAXD; j++) {
		uint d = lane + 32 * j;
		if (d >= p.head_dim) break;
		float v = acc[j] / l;
		o[d] = gate != nullptr ? v / (1.0f + exp(-gate[o - dst + d])) : v; // sigmoid_mul's expression
	}
}

kernel void attention(device float *dst [[buffer(0)]],
                      device const float *q [[buffer(1)]],
                      device const float *kc [[buffer(2)]],
                      device const float *vc [[buffer(3)]],
                      constant AttnParams &p [[buffer(4)]],
                      uint2 tg [[threadgroup_position_in_grid]],
                      uint lane [[thread_index_in_simdgroup]]) {
	TG_MEM float pw[32];
	attention_head(dst, q, kc, vc, p, nullptr, pw, tg, lane);
}

// attention_gated: attention followed by sigmoid_mul(dst, dst, gate) in one
// dispatch (the bits of the two); gate [rows, heads*head_dim] as dst.
kernel void attention_gated(device float *dst [[buffer(0)]],
                            device const float *q [[buffer(1)]],
                            device const float *kc [[buffer(2)]],
                            device const float *vc [[buffer(3)]],
                            constant AttnParams &p [[buffer(4)]],
                            device const float *gate [[buffer(5)]],
                            uint2 tg [[threadgroup_position_in_grid]],
                            uint lane [[thread_index_in_simdgroup]]) {
	TG_MEM float pw[32];
	attention_head(dst, q, kc, vc, p, gate, pw, tg, lane);
}

// ---- element-wise ops over n values (256-thread groups) ----
kernel void swiglu(device float *dst [[buffer(0)]],
                   device const float *gate [[buffer(1)]],
                   device const float *up [[buffer(2)]],
                   constant uint &n [[buffer(3)]],
                   uint gid [[thread_position_in_grid]]) {
	if (gid >= n) return;
	float g = gate[gid];
	dst[gid] = g / (1.0f + exp(-g)) * up[gid];
}

kernel void sigmoid_mul(device float *dst [[buffer(0)]],
                        device const float *x [[buffer(1)]],
                        device const float *gate [[buffer(2)]],
                        constant uint &n [[buffer(3)]],
                        uint gid [[thread_position_in_grid]]) {
	if (gid >= n) return;
	dst[gid] = x[gid] / (1.0f + exp(-gate[gid]));
}

kernel void add(device float *dst [[buffer(0)]],
                device const float *a [[buffer(1)]],
                device const float *b [[buffer(2)]],
                constant uint &n [[buffer(3)]],
                uint gid [[thread_position_in_grid]]) {
	if (gid >= n) return;
	dst[gid] = a[gid] + b[gid];
}

// ---- copies ----
struct CopyParams {
	uint rows, cols;
	uint dst_stride, dst_row, dst_col;
	uint src_stride, src_row, src_col;
};

// copy2d: grid (ceil(cols/256), rows), 256 threads.
kernel void copy2d(device float *dst [[buffer(0)]],
                   device const float *src [[buffer(1)]],
                   constant CopyParams &p [[buffer(2)]],
                   uint2 gid [[thread_position_in_grid]]) {
	if (gid.x >= p.cols || gid.y >= p.rows) return;
	dst[ulong(p.dst_row + gid.y) * p.dst_stride + p.dst_col + gid.x] =
	    src[ulong(p.src_row + gid.y) * p.src_stride + p.src_col + gid.x];
}

// deinterleave: src row r is [a_0 | b_0 | a_1 | b_1 | ...], chunk values
// per piece; a and b rows (cols values) get the a and b pieces in order.
// grid (ceil(cols/256), rows), 256 threads.
struct DeinterleaveParams {
	uint rows, cols, chunk;
};

kernel void deinterleave(device float *a [[buffer(0)]],
                         device float *b [[buffer(1)]],
                         device const float *src [[buffer(2)]],
                         constant DeinterleaveParams &p [[buffer(3)]],
                         uint2 gid [[thread_position_in_grid]]) {
	if (gid.x >= p.cols || gid.y >= p.rows) return;
	uint h = gid.x / p.chunk, i = gid.x - h * p.chunk;
	ulong s = ulong(gid.y) * (2 * p.cols) + 2 * h * p.chunk + i;
	ulong d = ulong(gid.y) * p.cols + gid.x;
	a[d] = src[s];
	b[d] = src[s + p.chunk];
}

// gather: dst row i = src row rows[i]; grid (ceil(cols/256), n), 256 threads.
kernel void gather(device float *dst [[buffer(0)]],
                   device const float *src [[buffer(1)]],
                   device const int *rows [[buffer(2)]],
                   constant uint2 &nc [[buffer(3)]],
                   uint2 gid [[thread_position_in_grid]]) {
	if (gid.x >= nc.y || gid.y >= nc.x) return;
	dst[ulong(gid.y) * nc.y + gid.x] = src[ulong(rows[gid.y]) * nc.y + gid.x];
}

// ---- greedy sampling: argmax of each row (lowest index on ties) ----
// argmax: grid (rows), 32 threads; out[r] = index of the largest value.
kernel void argmax(device int *out [[buffer(0)]],
                   device const float *x [[buffer(1)]],
                   constant uint &cols [[buffer(2)]],
                   uint tg [[threadgroup_position_in_grid]],
                   uint lane [[thread_index_in_simdgroup]]) {
	device const float *row = x + ulong(tg) * cols;
	float bv = NEG_BIG;
	uint bi = 0xffffffffu;
	for (uint i = lane; i < cols; i += 32) {
		float v = row[i];
		if (v > bv || bi == 0xffffffffu) {
			bv = v;
			bi = i;
		}
	}
	float m = simd_max(bv);
	uint win = simd_min(bv == m ? bi : 0xffffffffu);
	if (lane == 0) out[tg] = int(win);
}
