// abi.h: types shared by the two translation units of an emulator library:
// the kernels (prelude.h + MSL, which sees no C++ standard headers, so code
// that Metal would reject does not compile here either) and the runtime
// (runtime.cpp: fibers, scheduler, dispatch).
typedef unsigned int uint;
typedef unsigned short ushort;
typedef unsigned char uchar;
typedef unsigned long ulong; // 64-bit, as in MSL (LP64 hosts)
typedef _Float16 half;

#define EMU_VEC(T, N) typedef T T##N __attribute__((ext_vector_type(N)));
EMU_VEC(float, 2) EMU_VEC(float, 3) EMU_VEC(float, 4)
EMU_VEC(uint, 2) EMU_VEC(uint, 3) EMU_VEC(uint, 4)
EMU_VEC(int, 2) EMU_VEC(int, 3) EMU_VEC(int, 4)
EMU_VEC(ushort, 2) EMU_VEC(ushort, 3) EMU_VEC(ushort, 4)
EMU_VEC(half, 2) EMU_VEC(half, 4)
#undef EMU_VEC

namespace emu {
struct Group;

// Ctx is one thread (fiber) of a threadgroup.
struct Ctx {
	uint3 gid, lid, tgid, tpg, ngroups, grid;
	uint lindex, lane, sg, nsg;
	void *sp; // saved stack pointer while switched out
	bool done;
	Group *g;
};

typedef void (*Shim)(void **args, const Ctx &c);

struct Kernel {
	const char *name;
	Shim shim;
	int nargs;                  // buffer indices 0..nargs-1
	const unsigned long *sizes; // bytes a binding at each index must hold at least (0: unused index)
};

// Exchange is one SIMD-group collective's slots and the lanes that took part.
struct Exchange {
	unsigned char (*v)[16];
	uint mask;
	bool has(uint lane) const { return (mask >> lane) & 1; }
	template <class T> T at(uint lane) const {
		T x;
		__builtin_memcpy(&x, v[lane & 31], sizeof x);
		return x;
	}
};
} // namespace emu

// Runtime entry points used by the kernel side (opaque calls: the compiler
// must assume they read and write all memory, as a barrier does).
extern "C" void emu_barrier();
extern "C" emu::Exchange emu_exchange(const void *v, unsigned long n);
extern "C" uint emu_lane();
// emu_tg_init poisons a threadgroup-memory variable the first time a thread
// of the current threadgroup reaches its declaration (the GPU's threadgroup
// memory holds garbage) and accounts its size against Metal's 32 KiB limit.
extern "C" void emu_tg_init(void *p, unsigned long n, unsigned long *serial);
// emu_device_ptr turns a device address read from memory (a pointer table)
// into a host pointer, if the buffer it points into is resident for the
// dispatch (bound as an argument or declared with useResource); otherwise it
// records the violation, which fails the dispatch.
extern "C" const void *emu_device_ptr(const void *p);
