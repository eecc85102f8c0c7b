// runtime.cpp: the emulator's threadgroup runtime (compiled with abi.h in
// front, into the same shared library as the kernels). Every thread of a
// threadgroup is a fiber on one OS thread; threadgroup_barrier and SIMD-group
// collectives switch fibers until every live thread (lane) has arrived.
#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>
#include <sys/mman.h>

namespace emu {

extern "C" void emu_switch_ctx(void **save_sp, void *new_sp);
extern "C" void emu_fiber_start();

#if defined(__x86_64__)
asm(R"(
.text
.globl emu_switch_ctx
.type emu_switch_ctx,@function
emu_switch_ctx:
	pushq %rbp
	pushq %rbx
	pushq %r12
	pushq %r13
	pushq %r14
	pushq %r15
	subq $8, %rsp
	stmxcsr (%rsp)
	fnstcw 4(%rsp)
	movq %rsp, (%rdi)
	movq %rsi, %rsp
	ldmxcsr (%rsp)
	fldcw 4(%rsp)
	addq $8, %rsp
	popq %r15
	popq %r14
	popq %r13
	popq %r12
	popq %rbx
	popq %rbp
	ret
.size emu_switch_ctx,.-emu_switch_ctx
.globl emu_fiber_start
.type emu_fiber_start,@function
emu_fiber_start:
	movq %r12, %rdi
	callq *%r13
	ud2
.size emu_fiber_start,.-emu_fiber_start
)");
#elif defined(__aarch64__)
asm(R"(
.text
.globl emu_switch_ctx
.type emu_switch_ctx,%function
emu_switch_ctx:
	sub sp, sp, #176
	stp x19, x20, [sp, #0]
	stp x21, x22, [sp, #16]
	stp x23, x24, [sp, #32]
	stp x25, x26, [sp, #48]
	stp x27, x28, [sp, #64]
	stp x29, x30, [sp, #80]
	stp d8, d9, [sp, #96]
	stp d10, d11, [sp, #112]
	stp d12, d13, [sp, #128]
	stp d14, d15, [sp, #144]
	mov x9, sp
	str x9, [x0]
	mov sp, x1
	ldp x19, x20, [sp, #0]
	ldp x21, x22, [sp, #16]
	ldp x23, x24, [sp, #32]
	ldp x25, x26, [sp, #48]
	ldp x27, x28, [sp, #64]
	ldp x29, x30, [sp, #80]
	ldp d8, d9, [sp, #96]
	ldp d10, d11, [sp, #112]
	ldp d12, d13, [sp, #128]
	ldp d14, d15, [sp, #144]
	add sp, sp, #176
	ret
.globl emu_fiber_start
.type emu_fiber_start,%function
emu_fiber_start:
	mov x0, x19
	blr x20
	brk #0
)");
#else
#error "metal emulator: only x86-64 and arm64 hosts"
#endif

struct Group; // the threadgroup being run on this OS thread


struct SimdSlots {
	unsigned char v[2][32][16]; // double-buffered by generation parity
	uint mask[2];               // lanes that took part in that generation
	uint arrived, gen, alive;
};


struct Group {
	Ctx *ctx;
	int n;
	void *sched_sp;
	int cur;
	uint bar_arrived, bar_gen, alive;
	SimdSlots *simd;
	Shim shim;
	void **args;
	uint64_t progress; // bumped by every arrival, release and exit
	uint64_t serial;   // unique per threadgroup run (threadgroup memory poisoning)
	uint64_t tg_bytes; // threadgroup memory declared so far
};

static thread_local Group *cur_group;
static std::atomic<uint64_t> group_serial{0};

static inline Ctx &self() { return cur_group->ctx[cur_group->cur]; }

// yield switches back to the scheduler, which resumes the next fiber.
__attribute__((noinline)) static void yield() {
	Group *g = cur_group;
	Ctx &c = g->ctx[g->cur];
	emu_switch_ctx(&c.sp, g->sched_sp);
	asm volatile("" ::: "memory");
}

static void fiber_main(Ctx *c) {
	Group *g = c->g;
	g->shim(g->args, *c);
	c->done = true;
	g->progress++;
	g->alive--;
	g->simd[c->sg].alive--;
	// A barrier or collective may now be complete without this thread.
	if (g->alive > 0 && g->bar_arrived == g->alive) {
		g->bar_arrived = 0;
		g->bar_gen++;
	}
	SimdSlots &s = g->simd[c->sg];
	if (s.alive > 0 && s.arrived == s.alive) {
		s.arrived = 0;
		s.gen++;
	}
	emu_switch_ctx(&c->sp, g->sched_sp);
	__builtin_trap();
}

__attribute__((noinline)) static void barrier() {
	asm volatile("" ::: "memory");
	Group *g = cur_group;
	uint gen = g->bar_gen;
	g->progress++;
	if (++g->bar_arrived == g->alive) {
		g->bar_arrived = 0;
		g->bar_gen++;
		// Let the others run first; this keeps fibers in step.
		yield();
		return;
	}
	while (g->bar_gen == gen) yield();
}

// exchange publishes this lane's value (up to 16 bytes) and waits for every
// live lane of its SIMD-group; it returns that generation's slots and the
// mask of lanes that took part.
__attribute__((noinline)) static Exchange exchange(const void *v, size_t n) {
	asm volatile("" ::: "memory");
	Group *g = cur_group;
	Ctx &c = g->ctx[g->cur];
	SimdSlots &s = g->simd[c.sg];
	uint gen = s.gen;
	g->progress++;
	if (s.arrived == 0) s.mask[gen & 1] = 0;
	s.mask[gen & 1] |= 1u << c.lane;
	memcpy(s.v[gen & 1][c.lane], v, n);
	if (++s.arrived == s.alive) {
		s.arrived = 0;
		s.gen++;
		yield();
	} else {
		while (s.gen == gen) yield();
	}
	asm volatile("" ::: "memory");
	return Exchange{s.v[gen & 1], s.mask[gen & 1]};
}

static const size_t stack_size = 64 << 10;

struct Worker {
	std::vector<Ctx> ctx;
	std::vector<SimdSlots> simd;
	std::vector<int> order;
	char *stacks = nullptr;
	size_t nstacks = 0;
	~Worker() {
		if (stacks) munmap(stacks, nstacks * stack_size);
	}
	// ensure maps n fiber stacks, each with an inaccessible lowest page so
	// a stack overflow faults instead of corrupting the neighbour's stack.
	void ensure(size_t n) {
		if (n <= nstacks) return;
		if (stacks) munmap(stacks, nstacks * stack_size);
		stacks = (char *)mmap(nullptr, n * stack_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (stacks == MAP_FAILED) abort();
		for (size_t i = 0; i < n; i++) mprotect(stacks + i * stack_size, 4096, PROT_NONE);
		nstacks = n;
	}
};

// run_group runs one threadgroup to completion; false means deadlock: a
// whole round of the scheduler in which no thread arrived anywhere, was
// released or finished (a barrier or collective that some live thread
// never reaches — it would hang a real GPU too).
static bool run_group(Worker &w, Shim shim, void **args, uint3 tgid, uint3 tpg, uint3 ngroups, uint64_t seed) {
	int n = tpg.x * tpg.y * tpg.z;
	int nsg = (n + 31) / 32;
	w.ensure(n);
	w.ctx.resize(n);
	w.simd.resize(nsg);
	Group g;
	g.ctx = w.ctx.data();
	g.n = n;
	g.bar_arrived = 0;
	g.bar_gen = 0;
	g.alive = n;
	g.simd = w.simd.data();
	g.shim = shim;
	g.args = args;
	g.progress = 0;
	for (int s = 0; s < nsg; s++) {
		w.simd[s].arrived = 0;
		w.simd[s].gen = 0;
		w.simd[s].alive = (s == nsg - 1) ? n - 32 * s : 32;
	}
	for (int i = 0; i < n; i++) {
		Ctx &c = w.ctx[i];
		uint x = i % tpg.x, y = (i / tpg.x) % tpg.y, z = i / (tpg.x * tpg.y);
		c.lid = uint3{x, y, z};
		c.tgid = tgid;
		c.tpg = tpg;
		c.ngroups = ngroups;
		c.grid = ngroups * tpg;
		c.gid = tgid * tpg + c.lid;
		c.lindex = i;
		c.lane = i % 32;
		c.sg = i / 32;
		c.nsg = nsg;
		c.done = false;
		c.g = &g;
		// Stack: 8 slots popped by emu_switch_ctx (mxcsr word, 6 registers,
		// return address) + padding; see the asm above.
		uintptr_t top = (uintptr_t)(w.stacks + (size_t)(i + 1) * stack_size);
		top &= ~(uintptr_t)15;
#if defined(__x86_64__)
		uint64_t *sp = (uint64_t *)(top - 8 * 10);
		uint32_t mx = 0x1f80;
		uint16_t cw = 0x37f;
		memset(sp, 0, 8 * 10);
		memcpy(sp, &mx, 4);
		memcpy((char *)sp + 4, &cw, 2);
		sp[1] = 0;                     // r15
		sp[2] = 0;                     // r14
		sp[3] = (uint64_t)&fiber_main; // r13: function
		sp[4] = (uint64_t)&c;          // r12: argument
		sp[5] = 0;                     // rbx
		sp[6] = 0;                     // rbp
		sp[7] = (uint64_t)&emu_fiber_start;
		c.sp = sp;
#else
		uint64_t *sp = (uint64_t *)(top - 176);
		memset(sp, 0, 176);
		sp[0] = (uint64_t)&c;          // x19: argument
		sp[1] = (uint64_t)&fiber_main; // x20: function
		sp[11] = (uint64_t)&emu_fiber_start; // x30
		c.sp = sp;
#endif
	}
	g.serial = ++group_serial;
	g.tg_bytes = 0;
	cur_group = &g;
	// Seed 0: odd threadgroups run their threads in reverse order, so a
	// missing barrier (a read of threadgroup memory before another thread's
	// write) shows up as a wrong result in one of the two orders. Other
	// seeds: a fresh random order in every scheduling round.
	bool reverse = (tgid.x + tgid.y + tgid.z) & 1;
	uint64_t rng = seed ? seed ^ (0x9e3779b97f4a7c15ull * (1 + tgid.x + 65599ull * (tgid.y + 65599ull * tgid.z))) : 0;
	w.order.resize(n);
	int live = n;
	while (live > 0) {
		live = 0;
		uint64_t before = g.progress;
		for (int k = 0; k < n; k++) w.order[k] = reverse ? n - 1 - k : k;
		if (seed) {
			for (int k = n - 1; k > 0; k--) {
				rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
				int j = (int)(rng % (uint64_t)(k + 1));
				int t = w.order[k];
				w.order[k] = w.order[j], w.order[j] = t;
			}
		}
		for (int k = 0; k < n; k++) {
			int i = w.order[k];
			if (w.ctx[i].done) continue;
			g.cur = i;
			emu_switch_ctx(&g.sched_sp, w.ctx[i].sp);
			if (!w.ctx[i].done) live++;
		}
		if (live > 0 && g.progress == before) {
			cur_group = nullptr; // abandon the fibers; their stacks are reused
			return false;
		}
	}
	cur_group = nullptr;
	return true;
}

// Runs without fibers when a kernel has no barrier or collective would be
// nice, but we cannot know that; the fiber switch is cheap (tens of ns).

} // namespace emu

extern "C" void emu_barrier() { emu::barrier(); }
extern "C" emu::Exchange emu_exchange(const void *v, unsigned long n) { return emu::exchange(v, n); }
extern "C" uint emu_lane() { return emu::self().lane; }

namespace emu {
extern "C" const Kernel emu_kernels[];
extern "C" const int emu_nkernels;

// Desc is the dispatch descriptor passed from Go (layout mirrored there).
// Res is one buffer resident for a dispatch: device addresses
// [gpu, gpu+len) map to host memory at host.
struct Res {
	uint64_t gpu, len, host;
};

struct Desc {
	int32_t kernel, nargs, workers, nres;
	uint32_t groups[3], threads[3];
	void **args;
	uint64_t seed;
	const Res *res;    // sorted by gpu
	uint64_t bad_ptr;  // out: a non-resident device address a kernel read
	uint64_t tg_bytes; // out: threadgroup memory of a threadgroup over 32 KiB
};

// The dispatch being run (dispatches are serialised) and what its threads
// found wrong.
static const Desc *cur_desc;
static std::atomic<uint64_t> bad_ptr{0};
static std::atomic<uint64_t> tg_over{0};

} // namespace emu

extern "C" void emu_tg_init(void *p, unsigned long n, unsigned long *serial) {
	emu::Group *g = emu::cur_group;
	if (*serial == g->serial) return;
	*serial = g->serial;
	memset(p, 0xff, n); // NaN as float, -1 as int: garbage that shows
	g->tg_bytes += n;
	if (g->tg_bytes > 32768) {
		uint64_t z = 0;
		emu::tg_over.compare_exchange_strong(z, g->tg_bytes);
	}
}

extern "C" const void *emu_device_ptr(const void *p) {
	uint64_t a = (uint64_t)p;
	const emu::Desc *d = emu::cur_desc;
	int lo = 0, hi = d->nres;
	while (lo < hi) { // last range starting at or below a
		int mid = (lo + hi) / 2;
		if (d->res[mid].gpu <= a) lo = mid + 1; else hi = mid;
	}
	if (lo > 0 && a < d->res[lo - 1].gpu + d->res[lo - 1].len)
		return (const void *)(d->res[lo - 1].host + (a - d->res[lo - 1].gpu));
	uint64_t z = 0;
	emu::bad_ptr.compare_exchange_strong(z, a);
	return (const void *)(a & ((1ull << 48) - 1)); // the host address of a live buffer (keeps running)
}

extern "C" int emu_kernel_args(int k, const unsigned long **sizes) {
	if (k < 0 || k >= emu::emu_nkernels) return -1;
	*sizes = emu::emu_kernels[k].sizes;
	return emu::emu_kernels[k].nargs;
}

extern "C" int emu_lookup(const char *name) {
	for (int i = 0; i < emu::emu_nkernels; i++)
		if (strcmp(emu::emu_kernels[i].name, name) == 0) return i;
	return -1;
}

// emu_dispatch runs every threadgroup of one dispatch on up to d->workers
// OS threads (threadgroups handed out by an atomic counter) and returns when
// all have finished. The calling thread only waits.
namespace emu {
// Pool is the library's persistent worker threads (never destroyed: they
// live as long as the process, and no destructor may wait for them).
struct Pool {
	std::mutex mu, dispatch;
	std::condition_variable wake, done;
	int nthreads = 0;
	uint64_t gen = 0;
	int nw = 0, running = 0;
	const std::function<void()> *work = nullptr;
};
static Pool *pool = new Pool;

// pool_worker serves jobs after generation seen (the one current when it
// was spawned, so it takes part in the job being posted).
static void pool_worker(int idx, uint64_t seen) {
	std::unique_lock<std::mutex> lk(pool->mu);
	for (;;) {
		pool->wake.wait(lk, [&] { return pool->gen != seen; });
		seen = pool->gen;
		if (idx >= pool->nw) continue;
		const std::function<void()> *work = pool->work;
		lk.unlock();
		(*work)();
		lk.lock();
		if (--pool->running == 0) pool->done.notify_all();
	}
}

// run_on_pool runs work on nw pool threads and waits for all of them.
// The caller holds pool->dispatch: dispatches are serialised (one at a
// time per library).
static void run_on_pool(int nw, const std::function<void()> &work) {
	std::unique_lock<std::mutex> lk(pool->mu);
	while (pool->nthreads < nw) std::thread(pool_worker, pool->nthreads++, pool->gen).detach();
	pool->nw = nw;
	pool->running = nw;
	pool->work = &work;
	pool->gen++;
	pool->wake.notify_all();
	pool->done.wait(lk, [] { return pool->running == 0; });
	pool->work = nullptr;
}
} // namespace emu

extern "C" int emu_dispatch(const emu::Desc *d) {
	if (d->kernel < 0 || d->kernel >= emu::emu_nkernels) return -1;
	uint3 ng = uint3{d->groups[0], d->groups[1], d->groups[2]};
	uint3 tpg = uint3{d->threads[0], d->threads[1], d->threads[2]};
	uint64_t total = (uint64_t)ng.x * ng.y * ng.z;
	if (total == 0) return 0;
	std::atomic<uint64_t> next{0};
	std::atomic<bool> deadlock{false};
	emu::Shim shim = emu::emu_kernels[d->kernel].shim;
	void **args = d->args;
	auto work = [&]() {
		static thread_local emu::Worker w; // fiber stacks reused across dispatches
		for (;;) {
			uint64_t i = next.fetch_add(1);
			if (i >= total) return;
			uint3 tg = uint3{(uint)(i % ng.x), (uint)((i / ng.x) % ng.y), (uint)(i / ((uint64_t)ng.x * ng.y))};
			if (!emu::run_group(w, shim, args, tg, tpg, ng, d->seed)) {
				deadlock = true;
				next = total; // stop handing out threadgroups
				return;
			}
		}
	};
	int nw = d->workers < 1 ? 1 : d->workers;
	if ((uint64_t)nw > total) nw = (int)total;
	std::lock_guard<std::mutex> one(emu::pool->dispatch);
	emu::cur_desc = d;
	emu::bad_ptr = 0;
	emu::tg_over = 0;
	emu::run_on_pool(nw, work);
	emu::cur_desc = nullptr;
	((emu::Desc *)d)->bad_ptr = emu::bad_ptr;
	((emu::Desc *)d)->tg_bytes = emu::tg_over;
	if (deadlock) return -2;
	if (emu::tg_over) return -3;
	if (emu::bad_ptr) return -4;
	return 0;
}

