// Sparse MoE kernels (Qwen3-MoE, Qwen3-Next, Qwen3.5-MoE): routing on the
// GPU (softmax, top-k with ties to the lower expert, optional renormalise),
// a gathered matmul that reads each row's expert weights through a table of
// device pointers (all experts of a projection share one format), and the
// weighted combine with the sigmoid-gated shared expert.
#include "common.h"

struct RouteParams {
	uint T, E, K;
	uint normalize;
};

#define MOE_MAXE 16 // experts per lane: E <= 512

// route_token: the top-K of one token's router logits l [E]: softmax,
// then K rounds of the largest remaining probability (ties: the lower
// expert). With write, lane 0 stores idx [K] and wts [K] (normalised when
// p.normalize). Returns, on every lane, the expert of slot want.
inline uint route_token(device int *idx, device float *wts, device const float *l, constant RouteParams &p,
                        uint lane, bool write, uint want) {
	float pr[MOE_MAXE];
	float mx = NEG_BIG;
	for (uint i = 0; i < MOE_MAXE; i++) {
		uint e = lane + 32 * i;
		pr[i] = e < p.E ? l[e] : NEG_BIG;
		mx = max(mx, pr[i]);
	}
	mx = simd_max(mx);
	float sum = 0.0f;
	for (uint i = 0; i < MOE_MAXE; i++) {
		uint e = lane + 32 * i;
		pr[i] = e < p.E ? exp(pr[i] - mx) : 0.0f;
		sum += pr[i];
	}
	sum = simd_sum(sum);
	for (uint i = 0; i < MOE_MAXE; i++) {
		uint e = lane + 32 * i;
		pr[i] = e < p.E ? pr[i] / sum : -1.0f; // -1: not a candidate
	}
	float total = 0.0f;
	uint got = 0;
	for (uint s = 0; s < p.K; s++) {
		float bv = -1.0f;
		uint be = 0xffffffffu;
		for (uint i = 0; i < MOE_MAXE; i++) {
			uint e = lane + 32 * i;
			if (pr[i] > bv) { // strict: the lower index of this lane wins ties
				bv = pr[i];
				be = e;
			}
		}
		float m = simd_max(bv);
		uint win = simd_min(bv == m ? be : 0xffffffffu);
		if (win >= p.E) {
			// NaN logits: no candidate compares. Expert s (weight NaN) keeps the
			// gathered kernels inside the expert table; the NaN reaches the
			// logits, which the host reports (ErrNaNLogits).
			win = s % p.E;
			m = as_type<float>(0x7fc00000u); // NaN
		}
		if (win % 32 == lane) pr[win / 32] = -1.0f;
		if (write && lane == 0) {
			idx[s] = int(win);
			wts[s] = m;
		}
		if (s == want) got = win;
		total += m;
	}
	if (write && p.normalize != 0 && lane == 0)
		for (uint s = 0; s < p.K; s++) wts[s] = wts[s] / total;
	return got;
}

// moe_route: grid (T), 32 threads. logits [T, E] → idx [T, K], wts [T, K].
kernel void moe_route(device int *idx [[buffer(0)]],
                      device float *wts [[buffer(1)]],
                      device const float *logits [[buffer(2)]],
                      constant RouteParams &p [[buffer(3)]],
                      uint tg [[threadgroup_position_in_grid]],
                      uint lane [[thread_index_in_simdgroup]]) {
	route_token(idx + tg * p.K, wts + tg * p.K, logits + ulong(tg) * p.E, p, lane, true, 0);
}

// ExpertPtrs locates one expert's matrix (data, MLX scales and biases).
struct ExpertPtrs {
	device const uchar *w;
	device const uchar *s;
	device const uchar *b;
};

struct GatherParams {
	uint R;      // rows = tokens * K
	uint N, Kd;  // outputs, inputs
	uint K;      // experts per token
	uint x_per_row; // 1: x has one row per (token, slot); 0: one per token
};

// moe_matmul: y[r, n] = x[xr] · W_{idx[r]}[n]; grid (ceil(N/MM_SG), R),
// 32*MM_SG threads; one SIMD-group per output.
kernel void moe_matmul(device float *y [[buffer(0)]],
                       device const float *x [[buffer(1)]],
                       device const ExpertPtrs *table [[buffer(2)]],
                       constant WeightParams &wp [[buffer(3)]],
                       device const int *idx [[buffer(4)]],
                       constant GatherParams &p [[buffer(5)]],
                       uint2 tg [[threadgroup_position_in_grid]],
                       uint sg [[simdgroup_index_in_threadgroup]],
                       uint lane [[thread_index_in_simdgroup]]) {
	uint n = tg.x * 4 + sg;
	uint r = tg.y;
	if (n >= p.N || r >= p.R) return;
	ExpertPtrs e = table[idx[r]];
	e.w = DEVICE_PTR(e.w);
	e.s = DEVICE_PTR(e.s);
	e.b = DEVICE_PTR(e.b);
	device const float *xr = x + ulong(p.x_per_row != 0 ? r : r / p.K) * p.Kd;
	float acc = 0.0f;
	for (uint c = lane; c < p.Kd / 8; c += 32) {
		float w[8];
		load8(e.w, e.s, e.b, wp, n, c, w);
		float s = 0.0f;
		for (uint k = 0; k < 8; k++) s += w[k] * xr[8 * c + k];
		acc += s;
	}
	acc = simd_sum(acc);
	if (lane == 0) y[ulong(r) * p.N + n] = acc;
}

// moe_gate_up: the gathered gate and up matmuls with SwiGLU fused:
// y[r, n] = silu(g) * u with g = x[r / K] · G_{idx[r]}[n], u = x[r / K] ·
// U_{idx[r]}[n] (gate and up stored alike). Each dot product is summed as
// moe_matmul sums it and SwiGLU is swiglu's expression, so the result has
// the bits of the three separate dispatches. Grid (ceil(N/MM_SG), R),
// 32*MM_SG threads.
kernel void moe_gate_up(device float *y [[buffer(0)]],
                        device const float *x [[buffer(1)]],
                        device const ExpertPtrs *gtab [[buffer(2)]],
                        device const ExpertPtrs *utab [[buffer(3)]],
                        constant WeightParams &wp [[buffer(4)]],
                        device const int *idx [[buffer(5)]],
                        constant GatherParams &p [[buffer(6)]],
                        uint2 tg [[threadgroup_position_in_grid]],
                        uint sg [[simdgroup_index_in_threadgroup]],
                        uint lane [[thread_index_in_simdgroup]]) {
	uint n = tg.x * 4 + sg;
	uint r = tg.y;
	if (n >= p.N || r >= p.R) return;
	ExpertPtrs ge = gtab[idx[r]], ue = utab[idx[r]];
	ge.w = DEVICE_PTR(ge.w);
	ge.s = DEVICE_PTR(ge.s);
	ge.b = DEVICE_PTR(ge.b);
	ue.w = DEVICE_PTR(ue.w);
	ue.s = DEVICE_PTR(ue.s);
	ue.b = DEVICE_PTR(ue.b);
	device const float *xr = x + ulong(p.x_per_row != 0 ? r : r / p.K) * p.Kd;
	float ag = 0.0f, au = 0.0f;
	for (uint c = lane; c < p.Kd / 8; c += 32) {
		float w[8];
		load8(ge.w, ge.s, ge.b, wp, n, c, w);
		float s = 0.0f;
		for (uint k = 0; k < 8; k++) s += w[k] * xr[8 * c + k];
		ag += s;
		load8(ue.w, ue.s, ue.b, wp, n, c, w);
		s = 0.0f;
		for (uint k = 0; k < 8; k++) s += w[k] * xr[8 * c + k];
		au += s;
	}
	ag = simd_sum(ag);
	au = simd_sum(au);
	if (lane == 0) y[ulong(r) * p.N + n] = ag / (1.0f + exp(-ag)) * au;
}

// moe_route_gate_up: moe_route fused into moe_gate_up (one dispatch
// fewer per MoE layer). Every SIMD-group routes the token of its row
// itself (route_token, moe_route's code, so the experts and weights are
// the bits of moe_route's) and then computes moe_gate_up's expression for
// the expert of its slot; the first SIMD-group of slot 0 of each token
// stores idx and wts for moe_down_combine. Buffers 0-6 as moe_gate_up's
// (idx written), 7 wts, 8 router logits [T, E], 9 RouteParams; with
// has_shared, grid rows R..R+T-1 compute the shared expert's gate/up
// (matmul_gate_up's bits) into sy [T, N] from 11-17 (its gate's and up's
// data, scales, biases, WeightParams). Grid (ceil(max(N, shared N)/4),
// R (+ T)).
struct SharedGateUpParams {
	uint N;          // the shared expert's intermediate size
	uint has_shared;
};

kernel void moe_route_gate_up(device float *y [[buffer(0)]],
                              device const float *x [[buffer(1)]],
                              device const ExpertPtrs *gtab [[buffer(2)]],
                              device const ExpertPtrs *utab [[buffer(3)]],
                              constant WeightParams &wp [[buffer(4)]],
                              device int *idx [[buffer(5)]],
                              constant GatherParams &p [[buffer(6)]],
                              device float *wts [[buffer(7)]],
                              device const float *logits [[buffer(8)]],
                              constant RouteParams &rp [[buffer(9)]],
                              device float *sy [[buffer(10)]],
                              device const uchar *SGW [[buffer(11)]],
                              device const uchar *SGS [[buffer(12)]],
                              device const uchar *SGB [[buffer(13)]],
                              device const uchar *SUW [[buffer(14)]],
                              device const uchar *SUS [[buffer(15)]],
                              device const uchar *SUB [[buffer(16)]],
                              constant WeightParams &swp [[buffer(17)]],
                              constant SharedGateUpParams &sp [[buffer(18)]],
                              uint2 tg [[threadgroup_position_in_grid]],
                              uint sg [[simdgroup_index_in_threadgroup]],
                              uint lane [[thread_index_in_simdgroup]]) {
	uint n = tg.x * 4 + sg;
	uint r = tg.y;
	if (r >= p.R) {
		// The shared expert's gate/up of token r - R: matmul_gate_up's
		// expression for one row (the same sums, + 0.0f as its absent bias).
		uint t = r - p.R;
		if (sp.has_shared == 0 || t >= rp.T || n >= sp.N) return;
		device const float *xt = x + ulong(t) * p.Kd;
		float ag = 0.0f, au = 0.0f;
		for (uint c = lane; c < p.Kd / 8; c += 32) {
			float w[8];
			load8(SGW, SGS, SGB, swp, n, c, w);
			float s = 0.0f;
			for (uint k = 0; k < 8; k++) s += w[k] * xt[8 * c + k];
			ag += s;
			load8(SUW, SUS, SUB, swp, n, c, w);
			s = 0.0f;
			for (uint k = 0; k < 8; k++) s += w[k] * xt[8 * c + k];
			au += s;
		}
		float g = simd_sum(ag) + 0.0f;
		float u = simd_sum(au) + 0.0f;
		if (lane == 0) sy[ulong(t) * sp.N + n] = g / (1.0f + exp(-g)) * u;
		return;
	}
	if (n >= p.N) return;
	uint t = r / p.K, slot = r % p.K;
	bool write = tg.x == 0 && sg == 0 && slot == 0;
	uint ex = route_token(idx + t * p.K, wts + t * p.K, logits + ulong(t) * rp.E, rp, lane, write, slot);
	ExpertPtrs ge = gtab[ex], ue = utab[ex];
	ge.w = DEVICE_PTR(ge.w);
	ge.s = DEVICE_PTR(ge.s);
	ge.b = DEVICE_PTR(ge.b);
	ue.w = DEVICE_PTR(ue.w);
	ue.s = DEVICE_PTR(ue.s);
	ue.b = DEVICE_PTR(ue.b);
	device const float *xr = x + ulong(p.x_per_row != 0 ? r : r / p.K) * p.Kd;
	float ag = 0.0f, au = 0.0f;
	for (uint c = lane; c < p.Kd / 8; c += 32) {
		float w[8];
		load8(ge.w, ge.s, ge.b, wp, n, c, w);
		float s = 0.0f;
		for (uint k = 0; k < 8; k++) s += w[k] * xr[8 * c + k];
		ag += s;
		load8(ue.w, ue.s, ue.b, wp, n, c, w);
		s = 0.0f;
		for (uint k = 0; k < 8; k++) s += w[k] * xr[8 * c + k];
		au += s;
	}
	ag = simd_sum(ag);
	au = simd_sum(au);
	if (lane == 0) y[ulong(r) * p.N + n] = ag / (1.0f + exp(-ag)) * au;
}

struct CombineParams {
	uint T, H, K;
	uint has_shared;
};

// moe_combine: dst[t] = sum_s wts[t,s] y[t*K+s] (+ sigmoid(g[t]) ys[t]).
kernel void moe_combine(device float *dst [[buffer(0)]],
                        device const float *y [[buffer(1)]],
                        device const float *wts [[buffer(2)]],
                        device const float *ys [[buffer(3)]],
                        device const float *g [[buffer(4)]],
                        constant CombineParams &p [[buffer(5)]],
                        uint gid [[thread_position_in_grid]]) {
	if (gid >= p.T * p.H) return;
	uint t = gid / p.H, h = gid % p.H;
	float acc = 0.0f;
	for (uint s = 0; s < p.K; s++) acc += wts[t * p.K + s] * y[ulong(t * p.K + s) * p.H + h];
	if (p.has_shared != 0) acc += ys[gid] / (1.0f + exp(-g[t]));
	dst[gid] = acc;
}

struct DownCombineParams {
	uint T, H, K;
	uint inter;      // inputs of a routed expert's down projection
	uint has_shared;
	uint si;         // inputs of the shared expert's down projection
	uint has_res;    // also res = ra + rb (a residual add of dst), as add
};

// dot8 is one SIMD-group's dot product of x (Kd values) with row n of a
// matrix, summed as matmul and moe_matmul sum it: lane-strided chunks of 8,
// each chunk summed in order, then simd_sum.
inline float dot8(device const uchar *W, device const uchar *S, device const uchar *B,
                  constant WeightParams &wp, uint n, device const float *x, uint Kd, uint lane) {
	float acc = 0.0f;
	for (uint c = lane; c < Kd / 8; c += 32) {
		float w[8];
		load8(W, S, B, wp, n, c, w);
		float s = 0.0f;
		for (uint k = 0; k < 8; k++) s += w[k] * x[8 * c + k];
		acc += s;
	}
	return simd_sum(acc);
}

// moe_down_combine: the gathered down projection, the shared expert's down
// projection, its sigmoid gate and moe_combine in one dispatch:
// dst[t, n] = sum_s wts[t,s] (h[t*K+s] · D_{idx[t*K+s]}[n])
//             (+ (hs[t] · SD[n] + 0) / (1 + exp(-(x[t] · SG[0] + 0)))).
// Every dot product is summed as moe_matmul (routed) and matmul (shared,
// + 0.0f: its absent bias) sum it, and the combine is moe_combine's
// expression in its order, so the result has the bits of the four separate
// dispatches. The shared gate is recomputed by every SIMD-group of a token
// (one row of H values; cheaper than a dispatch at decode). Grid
// (ceil(H/MM_SG), T), 32*MM_SG threads; one SIMD-group per output. With
// has_res the residual add that follows (res = ra + rb, add's expression)
// is its epilogue (metal/fuse.go).
kernel void moe_down_combine(device float *dst [[buffer(0)]],
                             device const float *h [[buffer(1)]],
                             device const ExpertPtrs *table [[buffer(2)]],
                             constant WeightParams &wp [[buffer(3)]],
                             device const int *idx [[buffer(4)]],
                             device const float *wts [[buffer(5)]],
                             device const float *hs [[buffer(6)]],
                             device const uchar *SW [[buffer(7)]],
                             device const uchar *SS [[buffer(8)]],
                             device const uchar *SB [[buffer(9)]],
                             constant WeightParams &swp [[buffer(10)]],
                             device const float *x [[buffer(11)]],
                             device const uchar *GW [[buffer(12)]],
                             device const uchar *GS [[buffer(13)]],
                             device const uchar *GB [[buffer(14)]],
                             constant WeightParams &gwp [[buffer(15)]],
                             constant DownCombineParams &p [[buffer(16)]],
                             device float *res [[buffer(17)]],
                             device const float *ra [[buffer(18)]],
                             device const float *rb [[buffer(19)]],
                             uint2 tg [[threadgroup_position_in_grid]],
                             uint sg [[simdgroup_index_in_threadgroup]],
                             uint lane [[thread_index_in_simdgroup]]) {
	uint n = tg.x * 4 + sg;
	uint t = tg.y;
	if (n >= p.H || t >= p.T) return; // the whole SIMD-group leaves together
	float acc = 0.0f;
	for (uint s = 0; s < p.K; s++) {
		uint r = t * p.K + s;
		ExpertPtrs e = table[idx[r]];
		float y = dot8(DEVICE_PTR(e.w), DEVICE_PTR(e.s), DEVICE_PTR(e.b), wp, n, h + ulong(r) * p.inter, p.inter, lane);
		acc += wts[r] * y;
	}
	if (p.has_shared != 0) {
		float ys = dot8(SW, SS, SB, swp, n, hs + ulong(t) * p.si, p.si, lane) + 0.0f;
		float g = dot8(GW, GS, GB, gwp, 0, x + ulong(t) * p.H, p.H, lane) + 0.0f;
		acc += ys / (1.0f + exp(-g));
	}
	if (lane == 0) {
		ulong i = ulong(t) * p.H + n;
		dst[i] = acc;
		// One of ra, rb is dst: written and re-read by this lane (res may alias either).
		if (p.has_res != 0) res[i] = ra[i] + rb[i];
	}
}
