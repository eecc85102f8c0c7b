// Gated DeltaNet (linear attention) kernels of Qwen3-Next / Qwen3.5: causal
// depthwise conv1d + SiLU with a rolling state, the gated delta rule
// (recurrent form, also used for prefill: equal to the chunked form up to
// rounding) and the gated RMSNorm. docs/hybrid-models.md §4 has the maths.
// States are double-buffered by the host: kernels read *_from and write *_to.
#include "common.h"

struct DNConvParams {
	uint row, n;  // rows [row, row+n) of qkv
	uint C, K;    // conv channels, kernel size
	uint fresh;   // 1: the incoming state is zero
};

// dn_conv: u[t, c] = silu(sum_j w[c, j] * xin[t-(K-1)+j, c]); one thread per (t, c).
kernel void dn_conv(device float *u [[buffer(0)]],
                    device const float *x [[buffer(1)]],
                    device const float *w [[buffer(2)]],
                    device const float *state [[buffer(3)]],
                    constant DNConvParams &p [[buffer(4)]],
                    uint gid [[thread_position_in_grid]]) {
	if (gid >= p.n * p.C) return;
	uint t = gid / p.C, c = gid % p.C;
	float s = 0.0f;
	for (uint j = 0; j < p.K; j++) {
		int src = int(t) - int(p.K - 1) + int(j);
		float v;
		if (src >= 0) v = x[ulong(p.row + uint(src)) * p.C + c];
		else v = p.fresh != 0 ? 0.0f : state[ulong(int(p.K - 1) + src) * p.C + c];
		s += w[c * p.K + j] * v;
	}
	u[ulong(t) * p.C + c] = s / (1.0f + exp(-s));
}

// dn_conv_state: the new state is the last K-1 inputs of (old state ++ x).
kernel void dn_conv_state(device float *to [[buffer(0)]],
                          device const float *x [[buffer(1)]],
                          device const float *from [[buffer(2)]],
                          constant DNConvParams &p [[buffer(3)]],
                          uint gid [[thread_position_in_grid]]) {
	if (gid >= (p.K - 1) * p.C) return;
	uint s = gid / p.C, c = gid % p.C;
	uint i = p.n + s; // index into old state ++ x
	float v;
	if (i < p.K - 1) v = p.fresh != 0 ? 0.0f : from[ulong(i) * p.C + c];
	else v = x[ulong(p.row + i - (p.K - 1)) * p.C + c];
	to[ulong(s) * p.C + c] = v;
}

struct DNRuleParams {
	uint row, n;
	uint nk, nv, dk, dv;
	uint C;
	uint fresh;
};

#define DN_MAXK 8 // key_dim <= 256: values per lane

// dn_rule: grid (ceil(dv/32), nv), 32 threads. Thread j owns column j of
// the value head's state S [dk, dv] (in the *to* buffer); q and k are
// L2-normalised with SIMD-group sums; per token:
//   S *= exp(g); m = S^T k; d = (v - m) * beta; S += k d^T; o = S^T q.
kernel void dn_rule(device float *o [[buffer(0)]],
                    device const float *u [[buffer(1)]],
                    device const float *bt [[buffer(2)]],
                    device const float *at [[buffer(3)]],
                    device const float *a_log [[buffer(4)]],
                    device const float *dt_bias [[buffer(5)]],
                    device const float *S_from [[buffer(6)]],
                    device float *S_to [[buffer(7)]],
                    constant DNRuleParams &p [[buffer(8)]],
                    uint2 tg [[threadgroup_position_in_grid]],
                    uint lane [[thread_index_in_simdgroup]]) {
	uint h = tg.y;
	uint j = tg.x * 32 + lane;
	bool own = j < p.dv;
	uint kh = h / (p.nv / p.nk);
	uint kd = p.nk * p.dk;
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
		device const float *ur = u + ulong(t) * p.C;
		device const float *q = ur + kh * p.dk;
		device const float *k = ur + kd + kh * p.dk;
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
			float v = ur[2 * kd + h * p.dv + j];
			float d = (v - m) * beta;
			float out = 0.0f;
			for (uint i = 0; i < p.dk; i++) {
				ulong si = sbase + ulong(i) * p.dv + j;
				float s = S_to[si] * decay + (k[i] * ks) * d;
				S_to[si] = s;
				out += s * (q[i] * qs);
			}
			o[ulong(p.row + t) * p.nv * p.dv + h * p.dv + j] = out;
		}
	}
}

struct DNNormParams {
	uint row, nv, dv;
	float eps;
};

// dn_gated_norm: o = w * (o * rsqrt(mean(o^2) + eps)) * silu(z) per value
// head; grid (nv, n), 32 threads, in place.
kernel void dn_gated_norm(device float *o [[buffer(0)]],
                          device const float *z [[buffer(1)]],
                          device const float *w [[buffer(2)]],
                          constant DNNormParams &p [[buffer(3)]],
                          uint2 tg [[threadgroup_position_in_grid]],
                          uint lane [[thread_index_in_simdgroup]]) {
	ulong base = ulong(p.row + tg.y) * p.nv * p.dv + tg.x * p.dv;
	float ss = 0.0f;
	for (uint j = lane; j < p.dv; j += 32) ss += o[base + j] * o[base + j];
	ss = simd_sum(ss);
	float inv = 1.0f / sqrt(ss / float(p.dv) + p.eps);
	for (uint j = lane; j < p.dv; j += 32) {
		float zz = z[base + j];
		o[base + j] = w[j] * (o[base + j] * inv) * (zz / (1.0f + exp(-zz)));
	}
}
