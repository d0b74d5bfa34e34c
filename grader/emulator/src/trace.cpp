// trace.cpp: the traced (clang) build's load/store hooks: IO counting and the race detector.
#include "launcher.hpp"

namespace launcher {

// ----------------------------------------------------------------------------- race detection
//
// With race checking on, the kernel is the clang build whose loads and stores call the
// __sanitizer_cov_* hooks below, and every block runs on one OS thread, in a fixed order, so
// what is found (and the report) is deterministic. Each 4-byte word of the arrays and of the
// block's shared memory has a shadow: the last plain write, up to two reads and up to two
// atomics, each with (block instance, thread, barrier epoch, warp collective count, code
// address). Two accesses to a word by different threads, at least one of them a plain write
// (or an atomic against a plain write), race unless ordered: same block and a __syncthreads()
// between them (a different epoch), or same warp and a warp collective both lanes took part in
// between them. Nothing orders accesses of different blocks. A plain read against atomics is not
// reported: the CAS loop idiom (read, then atomicCAS to check) does exactly that.


Shadow* g_gshadow = nullptr;
size_t g_gshadow_bytes = 0;
uint32_t g_uid = 0;
uint32_t g_uid_first = 1;
std::vector<uint64_t> g_uid_block;
uintptr_t g_race_lib_base = 0;

uint3 block_of_linear(uint64_t linear) {
    const Launch& L = g_launch;
    return uint3{unsigned(linear % L.grid.x), unsigned(linear / L.grid.x % L.grid.y),
                 unsigned(linear / (uint64_t(L.grid.x) * L.grid.y))};
}

uint3 thread_of_linear(unsigned i) {
    const Launch& L = g_launch;
    return uint3{i % L.block.x, i / L.block.x % L.block.y, i / (L.block.x * L.block.y)};
}

// Whether access p (earlier) happens before access c (now) by CUDA's rules.
inline bool race_ordered(const Worker* w, const Access& p, const Access& c) {
    if (p.uid != c.uid) return false;  // different blocks: nothing orders them
    if (p.thread == c.thread) return true;  // program order
    if (w->vc_mode ? w->vc[size_t(c.thread) * w->threads + p.thread] > p.epoch : p.epoch != c.epoch)
        return true;  // a barrier between them: __syncthreads(), or a named barrier both took part in
    if ((p.thread >> 5) != (c.thread >> 5)) return false;
    // Same warp: ordered if, after p, a collective that both lanes took part in has completed and
    // c's lane has passed it.
    const std::vector<uint32_t>& hist = w->warp_hist[c.thread >> 5];
    const uint32_t hi = w->fibers[c.thread].wlast;
    const unsigned both = (1u << (p.thread & 31)) | (1u << (c.thread & 31));
    for (uint32_t k = p.wgen + 1, n = 0; k <= hi; ++k, ++n) {
        if ((hist[k - 1] & both) == both) return true;
        if (n > 4096) return true;  // give up rather than risk a false report
    }
    return false;
}

[[noreturn]] void race_report(Worker* w, const Access& p, const Access& c, bool global, uintptr_t addr) {
    const Launch& L = g_launch;
    int space = -3;  // -1 static shared, -2 dynamic shared, -3 global but in no array, else argument index
    uint64_t off = 0;
    if (global) {
        off = addr - L.res_lo;
        for (int i = 0; i < L.nargs; ++i)
            if (addr - L.arg_lo[i] < L.arg_len[i]) {
                space = i;
                off = addr - L.arg_lo[i];
                break;
            }
    } else if (addr - uintptr_t(w->tls_lo) < w->tls_len) {
        space = -1;
        off = addr - uintptr_t(w->tls_lo);
    } else {
        space = -2;
        off = addr - uintptr_t(emu_ctx.dyn_smem);
    }
    const uint3 pb = block_of_linear(g_uid_block[p.uid - g_uid_first]);
    const uint3 pt = thread_of_linear(p.thread);
    claim_report();
    fill_location(g_err);
    g_err->kind = kRace;
    g_err->line = -1;
    g_err->is_write = c.kind != kAccRead;
    g_err->addr = addr;
    g_err->pc = g_race_lib_base + c.pc;
    snprintf(g_err->text, sizeof g_err->text, "%d %llu %d %d %u %u %u %u %u %u %u %d %d %u %d", space,
             (unsigned long long)off, int(c.kind), int(p.kind), pb.x, pb.y, pb.z, pt.x, pt.y, pt.z, p.pc,
             int(p.uid == c.uid), int(p.uid == c.uid && (p.thread >> 5) == (c.thread >> 5)),
             unsigned(__builtin_popcount(c.mask)), int(w->vc_mode));
    finish_report();
}

inline void race_word(Worker* w, Shadow& s, const Access& c, bool global, uintptr_t word) {
    auto live = [&](const Access& p) { return p.uid != 0 && (global || p.uid == c.uid); };
    auto check = [&](const Access& p) {
        if (live(p) && (p.mask & c.mask) && !race_ordered(w, p, c))
            race_report(w, p, c, global, word + unsigned(__builtin_ctz(p.mask & c.mask)));
    };
    // Keep c in one of two slots: over a dead record or one c supersedes (same bytes, ordered
    // before c), else (three unordered accesses) prefer records from two different blocks.
    auto remember = [&](Access& s1, Access& s2) {
        if (!live(s1) || ((s1.mask & ~c.mask) == 0 && race_ordered(w, s1, c))) s1 = c;
        else if (!live(s2) || ((s2.mask & ~c.mask) == 0 && race_ordered(w, s2, c))) s2 = c;
        else if (s1.uid == s2.uid && c.uid != s1.uid) s2 = c;
    };
    switch (c.kind) {
        case kAccRead:
            check(s.w);
            remember(s.r1, s.r2);
            break;
        case kAccWrite:
            check(s.w);
            check(s.r1);
            check(s.r2);
            check(s.a1);
            check(s.a2);
            // Whatever was recorded is ordered before this write, and so before whatever this
            // write is ordered before: the write alone stands for them.
            s.w = c;
            s.r1 = s.r2 = s.a1 = s.a2 = Access{};
            break;
        default:
            check(s.w);
            remember(s.a1, s.a2);
            break;
    }
}

void race_access(uintptr_t a, unsigned size, int kind, uintptr_t ret) {
    Worker* w = t_race;
    Fiber* f = static_cast<Fiber*>(emu_ctx.cur);
    if (!f) return;
    const Launch& L = g_launch;
    Shadow* shadow;
    uintptr_t base;
    bool global = false;
    if (a - L.res_lo < L.res_len) {
        shadow = g_gshadow;
        base = L.res_lo;
        global = true;
    } else if (a - w->tls_base < w->tls_words * 4) {
        shadow = w->sshadow;
        base = w->tls_base;
    } else if (a - uintptr_t(emu_ctx.dyn_smem) < w->dyn_words * 4) {
        shadow = w->sshadow + w->tls_words;
        base = uintptr_t(emu_ctx.dyn_smem);
    } else {
        return;
    }
    Access c{w->uid, uint16_t(f->linear), 0, uint8_t(kind), w->vc_mode ? w->clock[f->linear] : w->epoch,
             uint32_t(w->warp_hist[f->linear >> 5].size()), uint32_t(ret - g_race_lib_base)};
    const uintptr_t off = a - base;
    const uintptr_t end = off + size;
    for (uintptr_t word = off & ~uintptr_t(3); word < end; word += 4) {
        unsigned lo = unsigned(std::max(off, word) - word), hi = unsigned(std::min(end, word + 4) - word);
        c.mask = uint8_t(((1u << hi) - 1) & ~((1u << lo) - 1));
        race_word(w, shadow[word >> 2], c, global, base + word);
    }
}

void* map_zeroed(size_t bytes) {
    if (!bytes) return nullptr;
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) report(kOther, -1, "cannot allocate %zu bytes of shadow memory for the race check", bytes);
    return p;
}

}  // namespace launcher

extern "C" {

using namespace launcher;

static inline void io_count(const void* p, unsigned size, bool store) {
    Worker* w = t_io;
    if (!w) return;
    uintptr_t a = reinterpret_cast<uintptr_t>(p);
    const Launch& L = g_launch;
    if (a - L.res_lo < L.res_len) {
        for (int i = 0; i < L.nargs; ++i)
            if (a - L.arg_lo[i] < L.arg_len[i]) {
                (store ? w->g_write : w->g_read)[i] += size;
                return;
            }
        return;
    }
    if (a - uintptr_t(w->tls_lo) < w->tls_len || a - uintptr_t(emu_ctx.dyn_smem) < w->dyn_len)
        (store ? w->s_write : w->s_read) += size;
}

// An atomic read-modify-write: one read and one write (the compiler does not trace atomics).
void emu_io_rmw(const void* addr, unsigned size) {
    io_count(addr, size, false);
    io_count(addr, size, true);
    if (t_race) race_access(uintptr_t(addr), size, kAccAtomic, uintptr_t(__builtin_return_address(0)));
}

// Every traced access: IO counts, the race detector, cp.async destinations still in flight, the
// memory profiler; each only when its mode is on.
// An access inside the launch's reservation but outside every array: the few bytes between an
// aligned array's end and the next guard page (see the layout in grader/emulator/_worker.py),
// which the normal build cannot fault on. Reported like a fault there.
[[noreturn]] static void outside_arrays(uintptr_t a, bool store, uintptr_t ret) {
    claim_report();
    fill_location(g_err);
    g_err->kind = kSegv;
    g_err->addr = a;
    g_err->is_write = store;
    g_err->pc = ret;
    g_err->text[0] = 0;
    finish_report();
}

static inline void trace_access(void* p, unsigned size, int kind, uintptr_t ret) {
    const Launch& L = g_launch;
    const uintptr_t a = uintptr_t(p);
    if (a - L.res_lo < L.res_len) {
        bool inside = false;
        for (int i = 0; i < L.nargs && !inside; ++i) inside = a - L.arg_lo[i] < L.arg_len[i] && a + size - L.arg_lo[i] <= L.arg_len[i];
        if (!inside) outside_arrays(a, kind == kAccWrite, ret);
    }
    io_count(p, size, kind == kAccWrite);
    if (t_race) race_access(uintptr_t(p), size, kind, ret);
    Worker* w = t_worker;
    if (w && w->async_inflight) async_access(w, uintptr_t(p), size, kind == kAccWrite, ret);
    if (w) hopper_access(w, uintptr_t(p), size, kind == kAccWrite, ret);
    if (t_prof) prof_access(t_prof, uintptr_t(p), size, kind == kAccWrite, ret);
}

#define EMU_IO_HOOKS(N)                                                                                     \
    void __sanitizer_cov_load##N(void* p) { trace_access(p, N, kAccRead, uintptr_t(__builtin_return_address(0))); } \
    void __sanitizer_cov_store##N(void* p) { trace_access(p, N, kAccWrite, uintptr_t(__builtin_return_address(0))); }
EMU_IO_HOOKS(1)
EMU_IO_HOOKS(2)
EMU_IO_HOOKS(4)
EMU_IO_HOOKS(8)
EMU_IO_HOOKS(16)
void __sanitizer_cov_trace_pc_guard(uint32_t*) {}
void __sanitizer_cov_trace_pc_guard_init(uint32_t*, uint32_t*) {}

}  // extern "C"
