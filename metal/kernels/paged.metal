// Kernels of the paged KV cache (engine.PagedKVOps): a layer's K and V are
// pools of blocks of bs positions, position-major inside a block (position
// o of block b, kv dimension d at (b*bs + o)*dim + d). A sequence reaches
// its positions through its block table: position t lies in block
// tab[t / bs] at offset t % bs. Both kernels take every sequence of a batch
// in one dispatch through a per-row table ri: ri[2r] is the position of
// batch row r (-1: the row belongs to no sequence), ri[2r+1] where its
// sequence's block table starts in tab.
#include "common.h"

struct PagedStoreParams {
	uint t;   // batch rows
	uint dim; // kv_heads * head_dim
	uint bs;  // positions per block
};

// store_kv_paged: grid ceil(t*dim/256), 256 threads; row r of k and v goes
// to its sequence's position ri[2r].
kernel void store_kv_paged(device float *kc [[buffer(0)]],
                           device float *vc [[buffer(1)]],
                           device const float *k [[buffer(2)]],
                           device const float *v [[buffer(3)]],
                           device const int *ri [[buffer(4)]],
                           device const int *tab [[buffer(5)]],
                           constant PagedStoreParams &p [[buffer(6)]],
                           uint gid [[thread_position_in_grid]]) {
	if (gid >= p.t * p.dim) return;
	uint r = gid / p.dim, d = gid % p.dim;
	int pos = ri[2 * r];
	if (pos < 0) return;
	uint blk = uint(tab[ri[2 * r + 1] + pos / int(p.bs)]);
	ulong dst = (ulong(blk) * p.bs + uint(pos) % p.bs) * p.dim + d;
	ulong src = ulong(r) * p.dim + d;
	kc[dst] = k[src];
	vc[dst] = v[src];
}

struct PagedAttnParams {
	uint heads, kv_heads, head_dim;
	uint bs;
	float scale;
};

#define PATT_MAXD 8 // head_dim <= 256: values per lane

// attention_paged: grid (heads, t), 32 threads: causal GQA attention of
// batch row r (at position pos = ri[2r]) over positions [0, pos] of its
// sequence. As the contiguous kernel: the SIMD-group walks the positions 32
// at a time (lane l scores position base+l, online softmax), and each lane
// accumulates its output dimensions (lane + 32j) from the 32 weights and
// the 32 cache rows the lanes looked up, both in threadgroup memory.
kernel void attention_paged(device float *dst [[buffer(0)]],
                            device const float *q [[buffer(1)]],
                            device const float *kc [[buffer(2)]],
                            device const float *vc [[buffer(3)]],
                            device const int *ri [[buffer(4)]],
                            device const int *tab [[buffer(5)]],
                            constant PagedAttnParams &p [[buffer(6)]],
                            uint2 tg [[threadgroup_position_in_grid]],
                            uint lane [[thread_index_in_simdgroup]]) {
	TG_MEM float pw[32];
	TG_MEM uint prow[32];
	uint h = tg.x, r = tg.y;
	int pos = ri[2 * r];
	if (pos < 0) return; // the whole threadgroup: uniform
	device const int *bt = tab + ri[2 * r + 1];
	uint kvh = h / (p.heads / p.kv_heads);
	uint kdim = p.kv_heads * p.head_dim;
	uint npos = uint(pos) + 1;
	device const float *qr = q + ulong(r) * p.heads * p.head_dim + h * p.head_dim;
	float m = NEG_BIG, l = 0.0f;
	float acc[PATT_MAXD];
	for (uint j = 0; j < PATT_MAXD; j++) acc[j] = 0.0f;
	for (uint base = 0; base < npos; base += 32) {
		uint t = base + lane;
		float s = NEG_BIG;
		uint row = 0;
		if (t < npos) {
			row = uint(bt[t / p.bs]) * p.bs + t % p.bs;
			device const float *kr = kc + ulong(row) * kdim + kvh * p.head_dim;
			float d = 0.0f;
			for (uint e = 0; e < p.head_dim; e++) d += qr[e] * kr[e];
			s = d * p.scale;
		}
		float mn = max(m, simd_max(s));
		float corr = exp(m - mn);
		float e = t < npos ? exp(s - mn) : 0.0f;
		l = l * corr + simd_sum(e);
		pw[lane] = e;
		prow[lane] = row;
		threadgroup_barrier(mem_flags::mem_threadgroup);
		uint cnt = min(32u, npos - base);
		for (uint j = 0; j < PATT_MAXD; j++) {
			uint d = lane + 32 * j;
			if (d >= p.head_dim) break;
			float a = acc[j] * corr;
			for (uint u = 0; u < cnt; u++) a += pw[u] * vc[ulong(prow[u]) * kdim + kvh * p.head_dim + d];
			acc[j] = a;
		}
		threadgroup_barrier(mem_flags::mem_threadgroup);
		m = mn;
	}
	device float *o = dst + ulong(r) * p.heads * p.head_dim + h * p.head_dim;
	for (uint j = 0; j < PATT_MAXD; j++) {
		uint d = lane + 32 * j;
		if (d >= p.head_dim) break;
		o[d] = acc[j] / l;
	}
}

// ---- split attention (flash-decoding) ----
// A decode row over a long cache is one SIMD-group walking every position:
// with few rows the GPU idles. It is also what keeps results batch
// invariant: the host takes this path for every call with a row longer
// than one chunk (a row of at most one chunk gets the bits of the one-pass
// kernel either way: one real split, the others empty, combined exactly).
// attention_paged_part splits the positions of
// each row into chunks of p.chunk (a multiple of 32): grid (heads, t,
// splits), and writes per (row, head, split) the running max m, the sum l
// and the unnormalised output acc to part ([t][heads][splits] records of
// head_dim + 2 floats: acc..., m, l). attention_combine merges the splits.
struct PagedPartParams {
	uint heads, kv_heads, head_dim;
	uint bs;
	float scale;
	uint chunk, splits;
	uint row0; // first batch row of the grid (calls go in blocks of rows)
};

kernel void attention_paged_part(device float *part [[buffer(0)]],
                                 device const float *q [[buffer(1)]],
                                 device const float *kc [[buffer(2)]],
                                 device const float *vc [[buffer(3)]],
                                 device const int *ri [[buffer(4)]],
                                 device const int *tab [[buffer(5)]],
                                 constant PagedPartParams &p [[buffer(6)]],
                                 uint3 tg [[threadgroup_position_in_grid]],
                                 uint lane [[thread_index_in_simdgroup]]) {
	TG_MEM float pw[32];
	TG_MEM uint prow[32];
	uint h = tg.x, r = tg.y + p.row0, sp = tg.z;
	int pos = ri[2 * r];
	if (pos < 0) return; // the whole threadgroup: uniform
	device float *rec = part + ((ulong(tg.y) * p.heads + h) * p.splits + sp) * (p.head_dim + 2);
	uint npos = uint(pos) + 1;
	uint start = sp * p.chunk, end = min(npos, start + p.chunk);
	float m = NEG_BIG, l = 0.0f;
	float acc[PATT_MAXD];
	for (uint j = 0; j < PATT_MAXD; j++) acc[j] = 0.0f;
	device const int *bt = tab + ri[2 * r + 1];
	uint kvh = h / (p.heads / p.kv_heads);
	uint kdim = p.kv_heads * p.head_dim;
	device const float *qr = q + ulong(r) * p.heads * p.head_dim + h * p.head_dim;
	for (uint base = start; base < end; base += 32) {
		uint t = base + lane;
		float s = NEG_BIG;
		uint row = 0;
		if (t < end) {
			row = uint(bt[t / p.bs]) * p.bs + t % p.bs;
			device const float *kr = kc + ulong(row) * kdim + kvh * p.head_dim;
			float d = 0.0f;
			for (uint e = 0; e < p.head_dim; e++) d += qr[e] * kr[e];
			s = d * p.scale;
		}
		float mn = max(m, simd_max(s));
		float corr = exp(m - mn);
		float e = t < end ? exp(s - mn) : 0.0f;
		l = l * corr + simd_sum(e);
		pw[lane] = e;
		prow[lane] = row;
		threadgroup_barrier(mem_flags::mem_threadgroup);
		uint cnt = min(32u, end - base);
		for (uint j = 0; j < PATT_MAXD; j++) {
			uint d = lane + 32 * j;
			if (d >= p.head_dim) break;
			float a = acc[j] * corr;
			for (uint u = 0; u < cnt; u++) a += pw[u] * vc[ulong(prow[u]) * kdim + kvh * p.head_dim + d];
			acc[j] = a;
		}
		threadgroup_barrier(mem_flags::mem_threadgroup);
		m = mn;
	}
	for (uint j = 0; j < PATT_MAXD; j++) {
		uint d = lane + 32 * j;
		if (d >= p.head_dim) break;
		rec[d] = acc[j];
	}
	if (lane == 0) {
		rec[p.head_dim] = m; // NEG_BIG and l = 0 for a split past the row's end
		rec[p.head_dim + 1] = l;
	}
}

struct PagedCombineParams {
	uint heads, head_dim, splits;
	uint row0;
};

// attention_combine: grid (heads, t), 32 threads: out = Σ_s acc_s·e^(m_s−M)
// / Σ_s l_s·e^(m_s−M) with M = max_s m_s.
kernel void attention_combine(device float *dst [[buffer(0)]],
                              device const float *part [[buffer(1)]],
                              device const int *ri [[buffer(2)]],
                              constant PagedCombineParams &p [[buffer(3)]],
                              uint2 tg [[threadgroup_position_in_grid]],
                              uint lane [[thread_index_in_simdgroup]]) {
	uint h = tg.x, r = tg.y + p.row0;
	if (ri[2 * r] < 0) return;
	uint stride = p.head_dim + 2;
	device const float *recs = part + (ulong(tg.y) * p.heads + h) * p.splits * stride;
	float M = NEG_BIG;
	for (uint s = 0; s < p.splits; s++) M = max(M, recs[s * stride + p.head_dim]);
	float L = 0.0f;
	for (uint s = 0; s < p.splits; s++) L += recs[s * stride + p.head_dim + 1] * exp(recs[s * stride + p.head_dim] - M);
	device float *o = dst + ulong(r) * p.heads * p.head_dim + h * p.head_dim;
	for (uint d = lane; d < p.head_dim; d += 32) {
		float a = 0.0f;
		for (uint s = 0; s < p.splits; s++) a += recs[s * stride + d] * exp(recs[s * stride + p.head_dim] - M);
		o[d] = a / L;
	}
}
