// launcher.cpp: the emulator's worker process.
//
// Python starts one per fiber back end and talks to it over stdin/stdout, one command a line.
// Arrays and results cross through a shared-memory file (fd passed at start-up). Kernel code runs
// here, never in the Python process: a crash, a wild write or an endless loop costs only this
// process, which reports what it knows in the error record and exits; Python starts a new one.
//
// Each CUDA thread of a block is a fiber that runs until it reaches a barrier or a warp
// collective, which is one legal CUDA schedule and a deterministic one. Blocks are spread over a
// pool of OS threads, one block at a time per OS thread, so the kernel library's thread-local
// storage serves as the block's static __shared__ memory.
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "emu_abi.hpp"

#if EMU_FIBERS_BOOST
#include <boost/context/detail/fcontext.hpp>
namespace bctx = boost::context::detail;
#endif

__attribute__((visibility("default"))) constinit thread_local emu::ThreadCtx emu_ctx{};

namespace {

constexpr size_t kPage = 4096;
constexpr size_t kGuard = 64 * 1024;  // PROT_NONE gap around every array: catches overruns up to 64 KiB
constexpr size_t kHeaderBytes = 64 * 1024;  // error record; print segments follow
constexpr size_t kStackBytes = 256 * 1024;  // per fiber, plus one guard page below
constexpr int kMaxArgs = 64;

// Error kinds; grader/emulator/_worker.py reads the same numbers.
enum Kind : int32_t {
    kNone = 0,
    kSegv = 1,
    kBounds = 2,
    kFpe = 3,
    kAssert = 4,
    kTrap = 5,
    kBarrier = 6,
    kTimeout = 7,
    kStack = 8,
    kBus = 9,
    kOther = 10,
    kSharedOob = 11,
    kRace = 12,
};

struct ErrorRecord {
    int32_t kind;
    int32_t has_thread;
    int32_t block[3];
    int32_t thread[3];
    int32_t line;
    int32_t is_write;
    uint64_t addr;
    uint64_t pc;
    uint64_t arena_base;
    uint64_t lib_base;
    char text[8192];
};
static_assert(sizeof(ErrorRecord) < kHeaderBytes);

struct PrintSegment {
    uint64_t used;
    uint64_t truncated;
    char data[];
};

enum State : int { kReady = 0, kRunning, kWaitBarrier, kWaitWarp, kDone };

struct Fiber : emu::FiberHead {
    int state;
    int line;
    int op;
    unsigned mask;
    int arg;
    int width;
    uint64_t val;
    uint64_t result;
    uint32_t wlast;  // race mode: number of the last warp collective this lane completed
    char* guard;  // lowest page of this fiber's stack, PROT_NONE
#if EMU_FIBERS_BOOST
    bctx::fcontext_t ctx;
#else
    ucontext_t uc;
#endif
};

struct Library {
    void* handle;
    uintptr_t base;
    std::string path;
    void* (*tls_touch)();
};

struct Launch {
    void (*entry)(void* const*);
    int lib;
    dim3 grid, block;
    size_t shared_mem;
    bool reverse, count_io, race;
    uint64_t nblocks;
    void* argv[kMaxArgs];
    uint64_t values[kMaxArgs];
    int nargs;
    uintptr_t arg_lo[kMaxArgs];
    uint64_t arg_len[kMaxArgs];
    uintptr_t res_lo;
    size_t res_len;
    std::atomic<uint64_t> next_block;
};

struct Worker {
    pthread_t thread;
    std::vector<Fiber> fibers;
    char* stacks = nullptr;
    size_t stack_count = 0;
    int threads = 0;  // CUDA threads in the current block
    int live = 0;
    int arrived = 0;
    int bar_count = 0, bar_and = 1, bar_or = 0;
#if EMU_FIBERS_BOOST
    bctx::fcontext_t sched;
#else
    ucontext_t sched;
#endif
    uint64_t block_linear = 0;
    PrintSegment* print = nullptr;
    size_t print_cap = 0;
    // static __shared__: the kernel library's TLS block for this thread
    int tls_lib = -1;
    unsigned char* tls_lo = nullptr;
    size_t tls_len = 0;
    // extern __shared__: ends at a guard page
    unsigned char* dyn_map = nullptr;
    size_t dyn_map_len = 0;
    size_t dyn_len = 0;
    // IO accounting
    uint64_t g_read[kMaxArgs], g_write[kMaxArgs];
    uint64_t s_read = 0, s_write = 0;
    // time-limit snapshot, written by the SIGUSR2 handler
    std::atomic<int> busy{0};
    std::atomic<int> snapped{0};
    uint64_t snap_pc = 0;
    int snap_has_thread = 0;
    uint3 snap_thread{}, snap_block{};
    // race mode (see "race detection" below)
    uint32_t uid = 0;    // this block's instance number in the launch
    uint32_t epoch = 0;  // __syncthreads() the block has passed
    std::vector<std::vector<uint32_t>> warp_hist;  // per warp: the mask of each completed collective
    struct Shadow* sshadow = nullptr;  // shared memory's shadow: static part, then dynamic part
    size_t sshadow_bytes = 0;
    uintptr_t tls_base = 0;  // tls_lo rounded down to 4 bytes
    size_t tls_words = 0, dyn_words = 0;
};

int g_proto_fd = 1;
int g_shm_fd = -1;
unsigned char* g_shm = nullptr;
ErrorRecord* g_err = nullptr;
int g_nthreads = 1;
size_t g_print_seg = 0;
std::vector<Library> g_libs;
std::vector<Worker*> g_workers;
Launch g_launch;
std::atomic<int> g_reporting{0};

std::mutex g_mu;
std::condition_variable g_cv_start, g_cv_done;
uint64_t g_generation = 0;
int g_finished = 0;

thread_local Worker* t_worker = nullptr;
thread_local Worker* t_io = nullptr;  // set while counting IO
thread_local Worker* t_race = nullptr;  // set while detecting races

// ----------------------------------------------------------------------------- reporting

// Only the first error is reported: another thread faulting meanwhile waits for the exit.
bool claim_report() {
    if (g_reporting.exchange(1) == 0) return true;
    for (;;) pause();
}

void fill_location(ErrorRecord* r) {
    r->has_thread = 0;
    r->line = -1;
    Worker* w = t_worker;
    if (!w) return;
    r->block[0] = emu_ctx.block_idx.x;
    r->block[1] = emu_ctx.block_idx.y;
    r->block[2] = emu_ctx.block_idx.z;
    if (emu_ctx.cur) {
        r->has_thread = 1;
        r->thread[0] = emu_ctx.cur->tid.x;
        r->thread[1] = emu_ctx.cur->tid.y;
        r->thread[2] = emu_ctx.cur->tid.z;
    }
}

[[noreturn]] void finish_report() {
    g_err->arena_base = g_launch.res_lo;
    g_err->lib_base = g_launch.lib >= 0 ? g_libs[g_launch.lib].base : 0;
    static const char msg[] = "ERR\n";
    ssize_t ignored = write(g_proto_fd, msg, sizeof msg - 1);
    (void)ignored;
    _exit(0);
}

[[noreturn]] void report(int kind, int line, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
[[noreturn]] void report(int kind, int line, const char* fmt, ...) {
    claim_report();
    fill_location(g_err);
    g_err->kind = kind;
    g_err->line = line;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_err->text, sizeof g_err->text, fmt, ap);
    va_end(ap);
    finish_report();
}

// ----------------------------------------------------------------------------- fibers

Fiber* cur_fiber() { return static_cast<Fiber*>(emu_ctx.cur); }

void fiber_body(Worker* w, Fiber* f) {
    g_launch.entry(g_launch.argv);
    f->state = kDone;
    w->live--;
}

#if EMU_FIBERS_BOOST
void fiber_entry(bctx::transfer_t t) {
    Worker* w = t_worker;
    w->sched = t.fctx;
    fiber_body(w, static_cast<Fiber*>(t.data));
    bctx::jump_fcontext(w->sched, nullptr);
    __builtin_unreachable();
}
void fiber_init(Worker*, Fiber* f) {
    f->ctx = bctx::make_fcontext(f->guard + kPage + kStackBytes, kStackBytes, fiber_entry);
}
void fiber_resume(Worker*, Fiber* f) {
    bctx::transfer_t t = bctx::jump_fcontext(f->ctx, f);
    f->ctx = t.fctx;
}
void fiber_yield(Worker* w) {
    bctx::transfer_t t = bctx::jump_fcontext(w->sched, nullptr);
    w->sched = t.fctx;
}
#else
void fiber_entry() {
    Worker* w = t_worker;
    Fiber* f = cur_fiber();
    fiber_body(w, f);
    swapcontext(&f->uc, &w->sched);
    __builtin_unreachable();
}
void fiber_init(Worker* w, Fiber* f) {
    // getcontext (a system call) ran once when the stack was made; makecontext only needs the
    // stack and link fields, which a finished context still holds.
    f->uc.uc_stack.ss_sp = f->guard + kPage;
    f->uc.uc_stack.ss_size = kStackBytes;
    f->uc.uc_link = &w->sched;
    makecontext(&f->uc, fiber_entry, 0);
}
void fiber_resume(Worker* w, Fiber* f) { swapcontext(&w->sched, &f->uc); }
void fiber_yield(Worker* w) { swapcontext(&cur_fiber()->uc, &w->sched); }
#endif

void ensure_stacks(Worker* w, size_t n) {
    if (w->stack_count >= n) return;
    if (w->stacks) munmap(w->stacks, w->stack_count * (kStackBytes + kPage));
    size_t bytes = n * (kStackBytes + kPage);
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) report(kOther, -1, "cannot allocate fiber stacks (%zu threads)", n);
    w->stacks = static_cast<char*>(p);
    w->stack_count = n;
    w->fibers.assign(n, Fiber{});
    for (size_t i = 0; i < n; ++i) {
        char* g = w->stacks + i * (kStackBytes + kPage);
        mprotect(g, kPage, PROT_NONE);
        w->fibers[i].guard = g;
#if !EMU_FIBERS_BOOST
        getcontext(&w->fibers[i].uc);
#endif
    }
}

// ----------------------------------------------------------------------------- descriptions

std::string thread_name(const Worker* w, int linear) {
    const uint3 t = w->fibers[linear].tid;
    char buf[64];
    snprintf(buf, sizeof buf, "(%u,%u,%u)", t.x, t.y, t.z);
    return buf;
}

// "threads (0,0,0)..(31,0,0), (64,0,0)" for a sorted list of linear ids.
std::string thread_ranges(const Worker* w, const std::vector<int>& ids) {
    std::string out;
    size_t shown = 0;
    for (size_t i = 0; i < ids.size();) {
        size_t j = i;
        while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
        if (shown == 4) {
            out += ", ...";
            break;
        }
        if (!out.empty()) out += ", ";
        out += thread_name(w, ids[i]);
        if (j > i) out += ".." + thread_name(w, ids[j]);
        ++shown;
        i = j + 1;
    }
    char count[48];
    snprintf(count, sizeof count, " [%zu thread%s]", ids.size(), ids.size() == 1 ? "" : "s");
    return out + count;
}

const char* warp_op_name(int op) {
    static const char* names[] = {"__shfl_sync", "__shfl_up_sync", "__shfl_down_sync", "__shfl_xor_sync",
                                  "__ballot_sync", "__any_sync", "__all_sync", "__syncwarp",
                                  "__reduce_add_sync", "__reduce_min_sync", "__reduce_max_sync",
                                  "__reduce_and_sync", "__reduce_or_sync", "__reduce_xor_sync",
                                  "__match_any_sync"};
    op &= 0xff;
    return op < emu::kWarpOpCount ? names[op] : "warp collective";
}

std::string where_waiting(const Fiber& f) {
    char buf[128];
    if (f.state == kWaitBarrier) snprintf(buf, sizeof buf, "wait at __syncthreads() on line %d", f.line);
    else if (f.state == kWaitWarp) snprintf(buf, sizeof buf, "wait at %s(mask 0x%08x) on line %d", warp_op_name(f.op), f.mask, f.line);
    else if (f.state == kDone) snprintf(buf, sizeof buf, "have finished (returned)");
    else snprintf(buf, sizeof buf, "are runnable");
    return buf;
}

// Every fiber of the block is blocked: explain who waits where.
[[noreturn]] void deadlock(Worker* w) {
    std::vector<std::pair<std::string, std::vector<int>>> groups;
    int first_waiting = -1;
    bool any_done = false, any_bar = false, any_warp = false;
    for (int i = 0; i < w->threads; ++i) {
        const Fiber& f = w->fibers[i];
        if (f.state != kDone && first_waiting < 0) first_waiting = i;
        any_done |= f.state == kDone;
        any_bar |= f.state == kWaitBarrier;
        any_warp |= f.state == kWaitWarp;
        std::string key = where_waiting(f);
        auto it = std::find_if(groups.begin(), groups.end(), [&](auto& g) { return g.first == key; });
        if (it == groups.end()) groups.push_back({key, {i}});
        else it->second.push_back(i);
    }
    std::string text = "deadlock: no thread of the block can continue.\n";
    for (size_t g = 0; g < groups.size() && g < 8; ++g)
        text += "  threads " + thread_ranges(w, groups[g].second) + " " + groups[g].first + "\n";
    if (any_bar && any_done)
        text += "Every thread of a block must reach each __syncthreads(): do not return early (or skip a "
                "__syncthreads() in an if) before a barrier that other threads wait at; guard the work, "
                "not the barrier.";
    else if (any_warp)
        text += "Every lane named in a warp collective's mask must call it: a lane that returned early, "
                "waits elsewhere, or is outside the block never arrives.";
    else
        text += "Threads wait at different barriers; on a GPU this kernel would hang.";
    Fiber& f = w->fibers[first_waiting < 0 ? 0 : first_waiting];
    emu_ctx.cur = &f;
    report(kBarrier, f.line, "%s", text.c_str());
}


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

enum AccessKind : uint8_t { kAccRead = 0, kAccWrite = 1, kAccAtomic = 2 };

struct Access {
    uint32_t uid;  // block instance, 0 = no access recorded
    uint16_t thread;  // linear thread index in the block
    uint8_t mask;  // bytes of the word touched
    uint8_t kind;
    uint32_t epoch;
    uint32_t wgen;  // collectives the thread's warp had completed at the time
    uint32_t pc;  // return address of the hook, as an offset in the kernel library
};

struct Shadow {
    Access w, r1, r2, a1, a2;
};

Shadow* g_gshadow = nullptr;  // global arrays: one per word of the launch's reservation
size_t g_gshadow_bytes = 0;
uint32_t g_uid = 0;
uint32_t g_uid_first = 1;
std::vector<uint64_t> g_uid_block;  // block instance - g_uid_first -> linear block index
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
    if (p.thread == c.thread || p.epoch != c.epoch) return true;  // program order, or a __syncthreads()
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
    snprintf(g_err->text, sizeof g_err->text, "%d %llu %d %d %u %u %u %u %u %u %u %d %d %u", space,
             (unsigned long long)off, int(c.kind), int(p.kind), pb.x, pb.y, pb.z, pt.x, pt.y, pt.z, p.pc,
             int(p.uid == c.uid), int(p.uid == c.uid && (p.thread >> 5) == (c.thread >> 5)),
             unsigned(__builtin_popcount(c.mask)));
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
    Access c{w->uid, uint16_t(f->linear), 0, uint8_t(kind), w->epoch,
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

// ----------------------------------------------------------------------------- scheduler

void poison_shared(Worker* w) {
    if (w->tls_len) memset(w->tls_lo, 0xff, w->tls_len);
    if (w->dyn_len) memset(emu_ctx.dyn_smem, 0xff, w->dyn_len);
}

void run_block(Worker* w, uint64_t linear) {
    const Launch& L = g_launch;
    emu_ctx.block_idx = uint3{unsigned(linear % L.grid.x), unsigned(linear / L.grid.x % L.grid.y),
                              unsigned(linear / (uint64_t(L.grid.x) * L.grid.y))};
    w->block_linear = linear;
    poison_shared(w);
    const int n = w->threads;
    if (L.race) {
        w->uid = ++g_uid;
        g_uid_block.push_back(linear);
        w->epoch = 0;
        w->warp_hist.resize(size_t((n + 31) / 32));
        for (auto& h : w->warp_hist) h.clear();
    }
    for (int i = 0; i < n; ++i) {
        Fiber& f = w->fibers[i];
        f.tid = uint3{unsigned(i % L.block.x), unsigned(i / L.block.x % L.block.y), unsigned(i / (L.block.x * L.block.y))};
        f.linear = i;
        f.state = kReady;
        f.wlast = 0;
        fiber_init(w, &f);
    }
    w->live = n;
    w->arrived = 0;
    while (w->live > 0) {
        bool ran = false;
        for (int k = 0; k < n; ++k) {
            Fiber& f = w->fibers[L.reverse ? n - 1 - k : k];
            if (f.state != kReady) continue;
            f.state = kRunning;
            emu_ctx.cur = &f;
            fiber_resume(w, &f);
            ran = true;
        }
        emu_ctx.cur = nullptr;
        if (!ran && w->live > 0) deadlock(w);
    }
}

// Finds this thread's copy of the kernel library's TLS block (the static __shared__ variables).
void bind_tls(Worker* w, int lib) {
    if (w->tls_lib == lib) return;
    Library& L = g_libs[lib];
    L.tls_touch();
    void* block = nullptr;
    size_t modid = 0;
    dlinfo(L.handle, RTLD_DI_TLS_DATA, &block);
    dlinfo(L.handle, RTLD_DI_TLS_MODID, &modid);
    struct Find {
        size_t modid;
        size_t size;
    } find{modid, 0};
    dl_iterate_phdr(
        [](dl_phdr_info* info, size_t, void* data) {
            auto* fd = static_cast<Find*>(data);
            if (info->dlpi_tls_modid != fd->modid) return 0;
            for (int i = 0; i < info->dlpi_phnum; ++i)
                if (info->dlpi_phdr[i].p_type == PT_TLS) fd->size = info->dlpi_phdr[i].p_memsz;
            return 1;
        },
        &find);
    w->tls_lib = lib;
    w->tls_lo = static_cast<unsigned char*>(block);
    w->tls_len = block ? find.size : 0;
}

void bind_dynamic_shared(Worker* w, size_t bytes) {
    size_t span = (bytes + kPage - 1) / kPage * kPage;
    if (w->dyn_map_len < span + kPage) {
        if (w->dyn_map) munmap(w->dyn_map, w->dyn_map_len);
        w->dyn_map_len = span + kPage;
        void* p = mmap(nullptr, w->dyn_map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) report(kOther, -1, "cannot allocate %zu bytes of dynamic shared memory", bytes);
        w->dyn_map = static_cast<unsigned char*>(p);
    }
    mprotect(w->dyn_map, w->dyn_map_len, PROT_READ | PROT_WRITE);
    mprotect(w->dyn_map + span, w->dyn_map_len - span, PROT_NONE);
    // The end of the array touches the guard page; keep 16-byte alignment for float4 and friends.
    size_t aligned = (bytes + 15) / 16 * 16;
    emu_ctx.dyn_smem = w->dyn_map + span - aligned;
    w->dyn_len = bytes;
}

void run_share(Worker* w) {
    Launch& L = g_launch;
    emu_ctx.grid_dim = L.grid;
    emu_ctx.block_dim = L.block;
    w->threads = int(L.block.x * L.block.y * L.block.z);
    ensure_stacks(w, size_t(w->threads));
    bind_tls(w, L.lib);
    bind_dynamic_shared(w, L.shared_mem);
    if (L.count_io) {
        memset(w->g_read, 0, sizeof w->g_read);
        memset(w->g_write, 0, sizeof w->g_write);
        w->s_read = w->s_write = 0;
        t_io = w;
    }
    if (L.race) {
        // One OS thread runs every block, in order: the race check is deterministic.
        if (w != g_workers[0]) {
            t_io = nullptr;
            return;
        }
        w->tls_base = uintptr_t(w->tls_lo) & ~uintptr_t(3);
        w->tls_words = w->tls_len ? (uintptr_t(w->tls_lo) + w->tls_len - w->tls_base + 3) / 4 : 0;
        w->dyn_words = (w->dyn_len + 3) / 4;
        w->sshadow_bytes = (w->tls_words + w->dyn_words) * sizeof(Shadow);
        w->sshadow = static_cast<Shadow*>(map_zeroed(w->sshadow_bytes));
        t_race = w;
    }
    for (;;) {
        uint64_t k = L.next_block.fetch_add(1);
        if (k >= L.nblocks) break;
        run_block(w, L.reverse ? L.nblocks - 1 - k : k);
    }
    t_io = nullptr;
    if (t_race) {
        t_race = nullptr;
        if (w->sshadow) munmap(w->sshadow, w->sshadow_bytes);
        w->sshadow = nullptr;
    }
}

void* worker_main(void* arg) {
    Worker* w = static_cast<Worker*>(arg);
    t_worker = w;
    // Faults may come from a fiber whose stack just overflowed: handle them on a separate stack.
    stack_t ss{};
    ss.ss_size = 256 * 1024;
    ss.ss_sp = malloc(ss.ss_size);
    sigaltstack(&ss, nullptr);
    uint64_t seen = 0;
    for (;;) {
        {
            std::unique_lock<std::mutex> lk(g_mu);
            g_cv_start.wait(lk, [&] { return g_generation != seen; });
            seen = g_generation;
        }
        w->busy.store(1);
        run_share(w);
        w->busy.store(0);
        {
            std::lock_guard<std::mutex> lk(g_mu);
            g_finished++;
        }
        g_cv_done.notify_all();
    }
    return nullptr;
}

// ----------------------------------------------------------------------------- signals

void on_fault(int sig, siginfo_t* si, void* ctx) {
    claim_report();
    auto* uc = static_cast<ucontext_t*>(ctx);
    uint64_t pc = uc->uc_mcontext.gregs[REG_RIP];
    uintptr_t addr = reinterpret_cast<uintptr_t>(si->si_addr);
    fill_location(g_err);
    g_err->pc = pc;
    g_err->addr = addr;
    g_err->is_write = (uc->uc_mcontext.gregs[REG_ERR] & 2) != 0;
    g_err->text[0] = 0;
    Worker* w = t_worker;
    Fiber* f = w ? cur_fiber() : nullptr;
    switch (sig) {
        case SIGSEGV:
            g_err->kind = kSegv;
            // A frame larger than the stack can move the stack pointer past the guard page.
            if (f && (addr - uintptr_t(f->guard) < kPage || uintptr_t(uc->uc_mcontext.gregs[REG_RSP]) < uintptr_t(f->guard) + kPage)) {
                g_err->kind = kStack;
            } else if (w && w->dyn_map && addr - uintptr_t(w->dyn_map) < w->dyn_map_len) {
                g_err->kind = kSharedOob;
                snprintf(g_err->text, sizeof g_err->text, "%zu %td", w->dyn_len,
                         static_cast<ptrdiff_t>(addr - uintptr_t(emu_ctx.dyn_smem)));
            }
            break;
        case SIGBUS: g_err->kind = kBus; break;
        case SIGFPE: g_err->kind = kFpe; break;
        case SIGILL: {
            const unsigned char* ip = reinterpret_cast<const unsigned char*>(pc);
            g_err->kind = (ip[0] == 0x0f && ip[1] == 0x0b) ? kBounds : kOther;
            if (g_err->kind == kOther) snprintf(g_err->text, sizeof g_err->text, "illegal instruction");
            break;
        }
        default:
            g_err->kind = kOther;
            snprintf(g_err->text, sizeof g_err->text, "the kernel aborted (signal %d)", sig);
    }
    finish_report();
}

void on_snapshot(int, siginfo_t*, void* ctx) {
    Worker* w = t_worker;
    if (!w) return;
    auto* uc = static_cast<ucontext_t*>(ctx);
    w->snap_pc = uc->uc_mcontext.gregs[REG_RIP];
    w->snap_block = emu_ctx.block_idx;
    w->snap_has_thread = emu_ctx.cur != nullptr;
    if (emu_ctx.cur) w->snap_thread = emu_ctx.cur->tid;
    w->snapped.store(1);
}

void install_handlers() {
    struct sigaction sa {};
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    for (int s : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT}) sigaction(s, &sa, nullptr);
    sa.sa_sigaction = on_snapshot;
    sigaction(SIGUSR2, &sa, nullptr);
}

[[noreturn]] void report_timeout(double limit) {
    claim_report();
    for (Worker* w : g_workers)
        if (w->busy.load()) pthread_kill(w->thread, SIGUSR2);
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
    Worker* hit = nullptr;
    while (!hit && std::chrono::steady_clock::now() < until) {
        for (Worker* w : g_workers)
            if (w->snapped.load()) {
                hit = w;
                break;
            }
        if (!hit) usleep(1000);
    }
    g_err->kind = kTimeout;
    g_err->line = -1;
    g_err->has_thread = 0;
    if (hit) {
        g_err->pc = hit->snap_pc;
        g_err->has_thread = hit->snap_has_thread;
        g_err->block[0] = hit->snap_block.x, g_err->block[1] = hit->snap_block.y, g_err->block[2] = hit->snap_block.z;
        g_err->thread[0] = hit->snap_thread.x, g_err->thread[1] = hit->snap_thread.y, g_err->thread[2] = hit->snap_thread.z;
    }
    snprintf(g_err->text, sizeof g_err->text, "%g", limit);
    finish_report();
}

// ----------------------------------------------------------------------------- commands

void reply(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void reply(const char* fmt, ...) {
    char buf[8192];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    for (int off = 0; off < n;) {
        ssize_t k = write(g_proto_fd, buf + off, size_t(n - off));
        if (k <= 0) _exit(1);
        off += int(k);
    }
}

void cmd_load(const char* path) {
    void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        std::string e = dlerror();
        std::replace(e.begin(), e.end(), '\n', ' ');
        reply("ERR %s\n", e.c_str());
        return;
    }
    link_map* lm = nullptr;
    dlinfo(h, RTLD_DI_LINKMAP, &lm);
    auto touch = reinterpret_cast<void* (*)()>(dlsym(h, "emu_tls_touch"));
    if (!touch) {
        reply("ERR %s has no emu_tls_touch\n", path);
        return;
    }
    g_libs.push_back(Library{h, lm->l_addr, path, touch});
    reply("OK %zu\n", g_libs.size() - 1);
}

// RUN lib entry gx gy gz bx by bz shared flags limit_s nargs, then per argument
// "P file_off span inner nbytes" (an array) or "S hex" (8 bytes of a scalar, little-endian).
void cmd_run(char* line) {
    Launch& L = g_launch;
    char* save = nullptr;
    auto next = [&]() -> const char* {
        const char* t = strtok_r(nullptr, " \n", &save);
        if (!t) report(kOther, -1, "malformed RUN command");
        return t;
    };
    strtok_r(line, " \n", &save);
    L.lib = atoi(next());
    const char* entry_name = next();
    // One token per statement: the order in which function arguments are evaluated is unspecified.
    unsigned dims[6];
    for (unsigned& d : dims) d = unsigned(strtoul(next(), nullptr, 10));
    L.grid = dim3(dims[0], dims[1], dims[2]);
    L.block = dim3(dims[3], dims[4], dims[5]);
    L.shared_mem = strtoull(next(), nullptr, 10);
    int flags = atoi(next());
    L.reverse = flags & 1;
    L.count_io = flags & 2;
    L.race = flags & 4;
    double limit = strtod(next(), nullptr);
    L.nargs = atoi(next());
    if (L.lib < 0 || size_t(L.lib) >= g_libs.size() || L.nargs < 0 || L.nargs > kMaxArgs)
        report(kOther, -1, "a kernel takes at most %d arguments here", kMaxArgs);
    L.entry = reinterpret_cast<void (*)(void* const*)>(dlsym(g_libs[L.lib].handle, entry_name));
    if (!L.entry) report(kOther, -1, "entry %s not found", entry_name);

    struct Region {
        uint64_t file_off, span, inner, nbytes;
    };
    std::vector<Region> regions;
    std::vector<int> region_of(L.nargs, -1);
    for (int i = 0; i < L.nargs; ++i) {
        const char* kind = next();
        if (kind[0] == 'P') {
            Region r;
            r.file_off = strtoull(next(), nullptr, 10);
            r.span = strtoull(next(), nullptr, 10);
            r.inner = strtoull(next(), nullptr, 10);
            r.nbytes = strtoull(next(), nullptr, 10);
            region_of[i] = int(regions.size());
            regions.push_back(r);
        } else {
            L.values[i] = strtoull(next(), nullptr, 16);
        }
    }
    // Layout: guard, region 0, guard, region 1, ..., guard.
    size_t total = kGuard;
    for (auto& r : regions) total += r.span + kGuard;
    void* res = mmap(nullptr, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (res == MAP_FAILED) report(kOther, -1, "cannot reserve %zu bytes for the arrays", total);
    L.res_lo = reinterpret_cast<uintptr_t>(res);
    L.res_len = total;
    std::vector<uintptr_t> region_at;
    uintptr_t at = L.res_lo + kGuard;
    for (auto& r : regions) {
        if (r.span && mmap(reinterpret_cast<void*>(at), r.span, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED | MAP_POPULATE,
                           g_shm_fd, off_t(r.file_off)) == MAP_FAILED)
            report(kOther, -1, "cannot map an array");
        region_at.push_back(at);
        at += r.span + kGuard;
    }
    for (int i = 0; i < L.nargs; ++i) {
        if (region_of[i] >= 0) {
            const Region& r = regions[region_of[i]];
            L.arg_lo[i] = region_at[region_of[i]] + r.inner;
            L.arg_len[i] = r.nbytes;
            L.values[i] = L.arg_lo[i];
        } else {
            L.arg_lo[i] = 0;
            L.arg_len[i] = 0;
        }
        L.argv[i] = &L.values[i];
    }
    L.nblocks = uint64_t(L.grid.x) * L.grid.y * L.grid.z;
    L.next_block.store(0);
    if (L.race) {
        g_gshadow_bytes = total / 4 * sizeof(Shadow);
        g_gshadow = static_cast<Shadow*>(map_zeroed(g_gshadow_bytes));
        g_uid_first = g_uid + 1;
        g_uid_block.clear();
        g_race_lib_base = g_libs[L.lib].base;
    }
    for (Worker* w : g_workers) {
        w->print->used = 0;
        w->print->truncated = 0;
    }

    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit);
    {
        std::unique_lock<std::mutex> lk(g_mu);
        g_finished = 0;
        g_generation++;
        g_cv_start.notify_all();
        if (!g_cv_done.wait_until(lk, deadline, [] { return g_finished == g_nthreads; })) {
            lk.unlock();
            report_timeout(limit);
        }
    }
    munmap(res, total);
    if (g_gshadow) {
        munmap(g_gshadow, g_gshadow_bytes);
        g_gshadow = nullptr;
    }

    std::string io;
    if (L.count_io) {
        uint64_t sr = 0, sw = 0;
        for (Worker* w : g_workers) sr += w->s_read, sw += w->s_write;
        io = " " + std::to_string(sr) + " " + std::to_string(sw);
        for (int i = 0; i < L.nargs; ++i) {
            uint64_t r = 0, wr = 0;
            for (Worker* w : g_workers) r += w->g_read[i], wr += w->g_write[i];
            io += " " + std::to_string(r) + " " + std::to_string(wr);
        }
    }
    reply("OK%s\n", io.c_str());
}

}  // namespace

// ----------------------------------------------------------------------------- kernel-facing API

extern "C" {

void emu_yield(void) {
    Worker* w = t_worker;
    Fiber* f = cur_fiber();
    if (!w || !f) return;
    f->state = kReady;
    fiber_yield(w);
}

void emu_syncthreads(int line) { emu_syncthreads_reduce(line, emu::kBarNone, 0); }

int emu_syncthreads_reduce(int line, int op, int pred) {
    Worker* w = t_worker;
    Fiber* f = cur_fiber();
    f->state = kWaitBarrier;
    f->line = line;
    if (w->arrived++ == 0) w->bar_count = 0, w->bar_and = 1, w->bar_or = 0;
    w->bar_count += pred;
    w->bar_and &= pred;
    w->bar_or |= pred;
    if (w->arrived < w->threads) {
        fiber_yield(w);
        return int(f->result);
    }
    // Last to arrive: every thread of the block waits here; release them all.
    int result = op == emu::kBarCount ? w->bar_count : op == emu::kBarAnd ? w->bar_and : w->bar_or;
    bool same = true;
    for (int i = 0; i < w->threads; ++i) same &= w->fibers[i].line == line;
    if (!same) {
        std::vector<std::pair<int, std::vector<int>>> by_line;
        for (int i = 0; i < w->threads; ++i) {
            int l = w->fibers[i].line;
            auto it = std::find_if(by_line.begin(), by_line.end(), [&](auto& g) { return g.first == l; });
            if (it == by_line.end()) by_line.push_back({l, {i}});
            else it->second.push_back(i);
        }
        std::string text = "threads of one block wait at different __syncthreads() calls:\n";
        for (auto& g : by_line)
            text += "  threads " + thread_ranges(w, g.second) + " wait at __syncthreads() on line " + std::to_string(g.first) + "\n";
        text += "A __syncthreads() inside an if/else or a loop that not all threads run the same way is a "
                "divergent barrier: on a GPU it hangs or corrupts results. Move it where every thread reaches it.";
        report(kBarrier, line, "%s", text.c_str());
    }
    for (int i = 0; i < w->threads; ++i) {
        w->fibers[i].state = kReady;
        w->fibers[i].result = uint64_t(result);
    }
    w->arrived = 0;
    w->epoch++;
    // Yield rather than run ahead: after a barrier the threads start again in schedule order,
    // much as a block's warps leave a barrier together on a GPU.
    fiber_yield(w);
    return result;
}

unsigned emu_activemask(void) {
    Worker* w = t_worker;
    Fiber* f = cur_fiber();
    int base = int(f->linear) & ~31;
    unsigned m = 0;
    for (int j = 0; j < 32 && base + j < w->threads; ++j)
        if (w->fibers[base + j].state != kDone) m |= 1u << j;
    return m;
}

uint64_t emu_warp(int op, int line, unsigned mask, uint64_t bits, int arg, int width) {
    Worker* w = t_worker;
    Fiber* f = cur_fiber();
    const int lane = int(f->linear) & 31;
    const int base = int(f->linear) - lane;
    if (width < 1 || width > 32 || (width & (width - 1)))
        report(kOther, line, "%s: width %d must be a power of two from 1 to 32", warp_op_name(op), width);
    if (!(mask >> lane & 1))
        report(kBarrier, line, "lane %d calls %s with mask 0x%08x, which does not include the lane itself; "
               "the mask must name every lane that calls it (often FULL_MASK / 0xffffffff)", lane, warp_op_name(op), mask);
    for (int j = 0; j < 32; ++j) {
        if (!(mask >> j & 1)) continue;
        if (base + j >= w->threads)
            report(kBarrier, line, "%s: mask 0x%08x names lane %d, but this warp has only %d threads (the block has "
                   "%d threads, not a multiple of 32). Lanes that do not exist never arrive: use "
                   "__activemask() or a mask of the existing lanes.",
                   warp_op_name(op), mask, j, w->threads - base, w->threads);
        const Fiber& o = w->fibers[base + j];
        if (o.state == kDone)
            report(kBarrier, line, "%s(mask 0x%08x) on line %d waits for lane %d (thread %s), which has already "
                   "finished: every lane in the mask must call the collective. Do not return early before a warp "
                   "shuffle; keep all lanes in the loop and guard only the loads and stores.",
                   warp_op_name(op), mask, line, j, thread_name(w, base + j).c_str());
    }
    f->state = kWaitWarp;
    f->op = op;
    f->line = line;
    f->mask = mask;
    f->val = bits;
    f->arg = arg;
    f->width = width;
    for (int j = 0; j < 32; ++j) {
        if (!(mask >> j & 1)) continue;
        const Fiber& o = w->fibers[base + j];
        if (o.state != kWaitWarp || o.mask != mask) {
            fiber_yield(w);
            return f->result;
        }
    }
    // Every lane of the mask is here: compute each lane's result and wake them.
    const int kind = op & 0xff;
    const bool is_signed = op & 0x100;
    for (int j = 0; j < 32; ++j) {
        if (!(mask >> j & 1)) continue;
        const Fiber& o = w->fibers[base + j];
        if ((o.op & 0xff) != kind)
            report(kBarrier, line, "lanes of one warp meet at different collectives: lane %d at %s (line %d), lane %d at %s (line %d)",
                   lane, warp_op_name(op), line, j, warp_op_name(o.op), o.line);
    }
    uint64_t all = 0, anyv = 0, allv = 1, sum = 0, red_and = ~0ull, red_or = 0, red_xor = 0;
    int64_t smin = INT64_MAX, smax = INT64_MIN;
    uint64_t umin = UINT64_MAX, umax = 0;
    for (int j = 0; j < 32; ++j) {
        if (!(mask >> j & 1)) continue;
        uint64_t v = w->fibers[base + j].val;
        if (v) all |= 1ull << j;
        anyv |= v != 0;
        allv &= v != 0;
        sum += v;
        red_and &= v, red_or |= v, red_xor ^= v;
        smin = std::min(smin, int64_t(v)), smax = std::max(smax, int64_t(v));
        umin = std::min(umin, v), umax = std::max(umax, v);
    }
    for (int j = 0; j < 32; ++j) {
        if (!(mask >> j & 1)) continue;
        Fiber& o = w->fibers[base + j];
        const int seg = j & ~(o.width - 1);
        int src = j;
        switch (kind) {
            case emu::kShflIdx: src = seg + (o.arg & (o.width - 1)); break;
            case emu::kShflUp: src = (j - seg) >= o.arg ? j - o.arg : j; break;
            case emu::kShflDown: src = (j - seg) + o.arg < o.width ? j + o.arg : j; break;
            case emu::kShflXor: src = j ^ o.arg; if ((src & ~(o.width - 1)) != seg || src > 31) src = j; break;
            default: break;
        }
        uint64_t r = 0;
        switch (kind) {
            case emu::kShflIdx: case emu::kShflUp: case emu::kShflDown: case emu::kShflXor:
                r = (src >= 0 && src < 32 && (mask >> src & 1)) ? w->fibers[base + src].val : o.val;
                break;
            case emu::kBallot: r = all; break;
            case emu::kAny: r = anyv; break;
            case emu::kAll: r = allv; break;
            case emu::kReduceAdd: r = sum; break;
            case emu::kReduceMin: r = is_signed ? uint64_t(smin) : umin; break;
            case emu::kReduceMax: r = is_signed ? uint64_t(smax) : umax; break;
            case emu::kReduceAnd: r = red_and; break;
            case emu::kReduceOr: r = red_or; break;
            case emu::kReduceXor: r = red_xor; break;
            case emu::kMatchAny:
                for (int k = 0; k < 32; ++k)
                    if ((mask >> k & 1) && w->fibers[base + k].val == o.val) r |= 1ull << k;
                break;
            default: break;
        }
        o.result = r;
        o.state = kReady;
    }
    if (t_race) {
        std::vector<uint32_t>& hist = w->warp_hist[size_t(base >> 5)];
        hist.push_back(mask);
        for (int j = 0; j < 32; ++j)
            if (mask >> j & 1) w->fibers[base + j].wlast = uint32_t(hist.size());
    }
    // Like a barrier: the lanes continue together, in schedule order.
    fiber_yield(w);
    return f->result;
}

void emu_assert_fail(const char* expr, const char* file, int line) {
    (void)file;
    report(kAssert, line, "%s", expr);
}

void emu_trap(const char* file, int line) {
    (void)file;
    report(kTrap, line, "__trap()");
}

int emu_printf(const char* fmt, ...) {
    char buf[4096];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0) return n;
    size_t len = std::min<size_t>(size_t(n), sizeof buf - 1);
    Worker* w = t_worker;
    if (!w) return n;
    PrintSegment* s = w->print;
    size_t need = 8 + ((len + 7) & ~size_t(7));
    if (s->used + need > w->print_cap) {
        s->truncated = 1;
        return n;
    }
    char* p = s->data + s->used;
    uint32_t head[2] = {uint32_t(w->block_linear), uint32_t(len)};
    memcpy(p, head, 8);
    memcpy(p + 8, buf, len);
    s->used += need;
    return n;
}

// clang's -fsanitize-coverage=trace-loads,trace-stores calls these before every memory access of a
// kernel built for IO accounting. Only accesses to launch arrays and shared memory count.
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

#define EMU_IO_HOOKS(N)                                                                                  \
    void __sanitizer_cov_load##N(void* p) {                                                              \
        io_count(p, N, false);                                                                           \
        if (t_race) race_access(uintptr_t(p), N, kAccRead, uintptr_t(__builtin_return_address(0)));     \
    }                                                                                                    \
    void __sanitizer_cov_store##N(void* p) {                                                             \
        io_count(p, N, true);                                                                            \
        if (t_race) race_access(uintptr_t(p), N, kAccWrite, uintptr_t(__builtin_return_address(0)));    \
    }
EMU_IO_HOOKS(1)
EMU_IO_HOOKS(2)
EMU_IO_HOOKS(4)
EMU_IO_HOOKS(8)
EMU_IO_HOOKS(16)
void __sanitizer_cov_trace_pc_guard(uint32_t*) {}
void __sanitizer_cov_trace_pc_guard_init(uint32_t*, uint32_t*) {}

}  // extern "C"

// argv: shm_fd nthreads print_segment_bytes
int main(int argc, char** argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s shm_fd threads print_segment_bytes\n", argv[0]);
        return 2;
    }
    g_shm_fd = atoi(argv[1]);
    g_nthreads = std::max(1, atoi(argv[2]));
    g_print_seg = strtoull(argv[3], nullptr, 10);
    // Stray writes to stdout (a kernel's puts, a library message) must not corrupt the protocol.
    g_proto_fd = dup(1);
    dup2(2, 1);
    size_t header = kHeaderBytes + size_t(g_nthreads) * g_print_seg;
    void* m = mmap(nullptr, header, PROT_READ | PROT_WRITE, MAP_SHARED, g_shm_fd, 0);
    if (m == MAP_FAILED) {
        perror("mmap");
        return 2;
    }
    g_shm = static_cast<unsigned char*>(m);
    g_err = reinterpret_cast<ErrorRecord*>(g_shm);
    g_launch.lib = -1;
    install_handlers();
    // Registered last, so it runs first: a kernel calling exit() is reported, and the exit does
    // not wait on static destructors while other threads still run.
    atexit([] { report(kOther, -1, "the kernel called exit()"); });
    for (int i = 0; i < g_nthreads; ++i) {
        Worker* w = new Worker();
        w->print = reinterpret_cast<PrintSegment*>(g_shm + kHeaderBytes + size_t(i) * g_print_seg);
        w->print_cap = g_print_seg - sizeof(PrintSegment);
        g_workers.push_back(w);
    }
    for (Worker* w : g_workers) pthread_create(&w->thread, nullptr, worker_main, w);
    reply("READY\n");
    char* line = nullptr;
    size_t cap = 0;
    while (getline(&line, &cap, stdin) > 0) {
        if (!strncmp(line, "LOAD ", 5)) {
            line[strcspn(line, "\n")] = 0;
            cmd_load(line + 5);
        } else if (!strncmp(line, "RUN ", 4)) {
            cmd_run(line);
        } else if (!strncmp(line, "QUIT", 4)) {
            break;
        }
    }
    _exit(0);
}
