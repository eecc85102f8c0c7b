// prelude.h: compiled (as C++17 by clang, after abi.h) in front of the
// Metal Shading Language source of metal/kernels. It provides what kernels
// use from Metal and nothing else (no C++ standard headers in this
// translation unit): address-space keywords, the math and SIMD-group
// functions, barriers, as_type, relaxed atomics, and the glue the generated
// entry shims use. Threadgroup memory is TG_MEM (common.h) = static
// thread_local: per OS thread = per threadgroup, shared by its fibers.
// Collectives must be reached by every live lane of the SIMD-group (uniform
// control flow per SIMD-group).

namespace emu {
template <class T> static inline T attr(uint3 v);
template <> inline uint attr<uint>(uint3 v) { return v.x; }
template <> inline ushort attr<ushort>(uint3 v) { return (ushort)v.x; }
template <> inline int attr<int>(uint3 v) { return (int)v.x; }
template <> inline uint2 attr<uint2>(uint3 v) { return uint2{v.x, v.y}; }
template <> inline uint3 attr<uint3>(uint3 v) { return v; }
template <> inline ushort2 attr<ushort2>(uint3 v) { return ushort2{(ushort)v.x, (ushort)v.y}; }
template <> inline ushort3 attr<ushort3>(uint3 v) { return ushort3{(ushort)v.x, (ushort)v.y, (ushort)v.z}; }
static inline uint3 scalar3(uint v) { return uint3{v, 0, 0}; }
} // namespace emu

// ---- Metal standard library subset ----
namespace metal {
enum class mem_flags { mem_none = 0, mem_device = 1, mem_threadgroup = 2, mem_texture = 4 };
inline mem_flags operator|(mem_flags a, mem_flags b) { return (mem_flags)((int)a | (int)b); }
inline void threadgroup_barrier(mem_flags) { emu_barrier(); }
// A SIMD-group barrier only synchronises the lanes of one SIMD-group.
inline void simdgroup_barrier(mem_flags) {
	int z = 0;
	emu_exchange(&z, sizeof z);
}

template <class T, class U> inline T as_type(U u) {
	static_assert(sizeof(T) == sizeof(U), "as_type: size mismatch");
	return __builtin_bit_cast(T, u);
}

inline float exp(float x) { return __builtin_expf(x); }
inline float exp2(float x) { return __builtin_exp2f(x); }
inline float log(float x) { return __builtin_logf(x); }
inline float sqrt(float x) { return __builtin_sqrtf(x); }
inline float rsqrt(float x) { return 1.0f / __builtin_sqrtf(x); }
inline float abs(float x) { return __builtin_fabsf(x); }
inline float fabs(float x) { return __builtin_fabsf(x); }
inline float tanh(float x) { return __builtin_tanhf(x); }
inline float cos(float x) { return __builtin_cosf(x); }
inline float sin(float x) { return __builtin_sinf(x); }
inline float pow(float x, float y) { return __builtin_powf(x, y); }
inline float floor(float x) { return __builtin_floorf(x); }
inline float fma(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
inline bool isinf(float x) { return __builtin_isinf(x); }
inline bool isnan(float x) { return __builtin_isnan(x); }
template <class T> inline T max(T a, T b) { return a > b ? a : b; }
template <class T> inline T min(T a, T b) { return a < b ? a : b; }
inline float fmax(float a, float b) { return __builtin_fmaxf(a, b); }
inline float fmin(float a, float b) { return __builtin_fminf(a, b); }
template <class T> inline T clamp(T x, T lo, T hi) { return min(max(x, lo), hi); }
template <class T> inline T select(T a, T b, bool c) { return c ? b : a; }
namespace precise {
inline float exp(float x) { return __builtin_expf(x); }
inline float log(float x) { return __builtin_logf(x); }
inline float cos(float x) { return (float)__builtin_cos((double)x); }
inline float sin(float x) { return (float)__builtin_sin((double)x); }
inline float sqrt(float x) { return __builtin_sqrtf(x); }
inline float rsqrt(float x) { return 1.0f / __builtin_sqrtf(x); }
inline float divide(float a, float b) { return a / b; }
} // namespace precise
namespace fast {
using precise::cos;
using precise::exp;
using precise::log;
using precise::sin;
using precise::sqrt;
using precise::rsqrt;
} // namespace fast

template <class T> inline T simd_sum(T v) {
	auto e = emu_exchange(&v, sizeof v);
	T r = T(0);
	for (uint l = 0; l < 32; l++)
		if (e.has(l)) r += e.template at<T>(l);
	return r;
}
template <class T> inline T simd_max(T v) {
	auto e = emu_exchange(&v, sizeof v);
	T r = v;
	for (uint l = 0; l < 32; l++)
		if (e.has(l) && e.template at<T>(l) > r) r = e.template at<T>(l);
	return r;
}
template <class T> inline T simd_min(T v) {
	auto e = emu_exchange(&v, sizeof v);
	T r = v;
	for (uint l = 0; l < 32; l++)
		if (e.has(l) && e.template at<T>(l) < r) r = e.template at<T>(l);
	return r;
}
template <class T> inline T simd_shuffle(T v, ushort lane) {
	auto e = emu_exchange(&v, sizeof v);
	return e.has(lane & 31) ? e.template at<T>(lane) : T(0);
}
template <class T> inline T simd_broadcast(T v, ushort lane) { return simd_shuffle(v, lane); }
template <class T> inline T simd_shuffle_down(T v, ushort d) {
	uint l = emu_lane() + d;
	auto e = emu_exchange(&v, sizeof v);
	return (l < 32 && e.has(l)) ? e.template at<T>(l) : v;
}
template <class T> inline T simd_shuffle_xor(T v, ushort m) {
	uint l = (emu_lane() ^ m) & 31;
	auto e = emu_exchange(&v, sizeof v);
	return e.has(l) ? e.template at<T>(l) : T(0);
}
template <class T> inline T simd_prefix_exclusive_sum(T v) {
	uint me = emu_lane();
	auto e = emu_exchange(&v, sizeof v);
	T r = T(0);
	for (uint l = 0; l < me; l++)
		if (e.has(l)) r += e.template at<T>(l);
	return r;
}

// Device atomics (relaxed), for the few kernels that use them.
enum memory_order { memory_order_relaxed };
struct atomic_uint { uint v; };
struct atomic_int { int v; };
struct atomic_float { float v; };
inline uint atomic_fetch_add_explicit(volatile atomic_uint *a, uint x, memory_order) { return __atomic_fetch_add(&a->v, x, __ATOMIC_RELAXED); }
inline int atomic_fetch_add_explicit(volatile atomic_int *a, int x, memory_order) { return __atomic_fetch_add(&a->v, x, __ATOMIC_RELAXED); }
inline uint atomic_load_explicit(volatile atomic_uint *a, memory_order) { return __atomic_load_n(&a->v, __ATOMIC_RELAXED); }
inline void atomic_store_explicit(volatile atomic_uint *a, uint x, memory_order) { __atomic_store_n(&a->v, x, __ATOMIC_RELAXED); }
inline float atomic_fetch_add_explicit(volatile atomic_float *a, float x, memory_order) {
	volatile uint *p = (volatile uint *)&a->v;
	uint old = __atomic_load_n(p, __ATOMIC_RELAXED);
	for (;;) {
		uint nw = __builtin_bit_cast(uint, __builtin_bit_cast(float, old) + x);
		if (__atomic_compare_exchange_n(p, &old, nw, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) return __builtin_bit_cast(float, old);
	}
}
} // namespace metal

// Address-space keywords and the kernel function qualifier.
#define device
#define constant const
#define thread
#define threadgroup
#define kernel
#define METAL_EMULATED 1
