// hopper.cpp: Hopper's primitives as the PTX ISA defines them: mbarrier (phases, arrivals,
// transaction bytes), wgmma.mma_async (a warpgroup's asynchronous MMA, operands through matrix
// descriptors, accumulators in flight until the wait that retires them) and fence.proxy.async.
//
// mbarrier. A barrier is a 64-bit word of shared memory on a GPU; here its state lives in a table
// of the block (t_hop.bars), found by address: the phase number, the arrivals the phase still
// waits for, and its transaction count (bytes announced by expect_tx minus bytes landed). A phase
// completes when both reach zero; then the phase number grows by one and the count starts again.
// try_wait.parity(p) succeeds once the phase of parity p has completed (the current phase's
// parity differs from p). A thread whose try_wait cannot succeed yet sleeps; if no thread of the
// block can run, the sleepers' time limits pass (try_wait returns false, as the ISA allows) once,
// and if that changes nothing the block is deadlocked: the report names each barrier, its phase,
// its arrivals and bytes, and who waits where.
//
// wgmma. Each thread calls with its own registers; the 128th thread of the warpgroup to arrive
// reads A and B (shared memory through the descriptors, A's registers from the fragments), adds
// the exact products to C in double and rounds once, and hands each thread its N / 2 results in
// a record kept in flight: the thread's accumulator registers hold 0xFF bytes (NaN) until its
// wgmma_wait_group retires the record's group and writes the results. A wgmma into accumulators
// still in flight (a chain of wgmmas into one accumulator) takes the in-flight values as C.
//
// Checks a GPU leaves undefined: a thread that issues a wgmma without ever having executed
// wgmma.fence, accumulators changed between the wait that returned them and a wgmma that uses
// them again without a fence between, accumulators written while in flight (seen at the wait), a
// warpgroup incomplete or at different calls, descriptors not uniform, operands outside shared
// memory. The traced build also names every load or store of an accumulator still in flight
// (with both lines), and shared memory written by ordinary stores that a wgmma reads without a
// fence.proxy.async by the writer in between.
#include <memory>

#include "emu_widen.hpp"
#include "launcher.hpp"

namespace launcher {

struct Landing {  // a TMA load's bytes, in flight until they count, then waiting for the phase
    unsigned char* dst;
    std::vector<unsigned char> data;
    int line;
    bool counted;  // its bytes have counted down the barrier's transaction count
};

struct MBarrier {
    uintptr_t addr;
    int count;  // arrivals per phase
    int pending;  // arrivals the current phase still waits for
    int64_t tx;  // bytes announced minus bytes landed, this phase
    int64_t tx_expected, tx_landed;  // this phase, for the deadlock report
    uint64_t phase;
    int init_line, last_arrive_line, last_expect_line;
    std::vector<uint32_t> known;  // race mode: the arrivals' vector clocks, joined
    std::vector<uint32_t> released;  // race mode: what the last completed phase passes on
    std::vector<Landing> landings;
};

struct Accumulator {  // one wgmma's results for one thread, in flight
    float* d;
    int n;  // the shape's N: N / 2 registers
    uint64_t group;
    int line;
    const unsigned* a;  // RS form: the A registers it read (must not be written while in flight)
    float v[128];
};

struct Returned {  // accumulators a wait wrote back, as it wrote them
    float* d;
    int n;  // registers
    int wait_line;
    float v[128];
};

struct BulkStore {  // a TMA store's in-bounds elements, written at the wait that retires its group
    uint64_t group;
    unsigned elem;
    std::vector<std::pair<unsigned char*, uint64_t>> values;
};

struct HopperThread {
    bool fenced_ever = false, fenced_since_wait = false;
    int fence_line = 0, wait_line = 0;
    uint64_t committed = 0;  // wgmma groups closed; the open group's number
    std::vector<Accumulator> inflight;
    std::vector<Returned> returned;
    uint32_t proxy_fences = 0;  // fence.proxy.async executed
    uint64_t bulk_committed = 0;  // cp.async.bulk groups closed
    std::vector<BulkStore> stores;
};

struct HopperBlock {
    std::vector<MBarrier> bars;
    std::vector<HopperThread> threads;
    int inflight = 0;  // accumulators in flight in the block (the traced build checks accesses)
    int landings = 0;  // TMA loads not landed yet
    uint64_t events = 0;  // mbarrier arrivals and completions
    uint64_t stall_sig = 0;  // the block's state when the sleepers last timed out
    bool stalled_once = false;
    std::vector<int> wg_arrived;  // per warpgroup: threads waiting at its wgmma
    // Traced build: per 4-byte word of the shared window, the last ordinary store: 1 + thread, that
    // thread's fence.proxy.async count at the store, and the store's code address.
    std::vector<uint16_t> writer;
    std::vector<uint32_t> writer_fences;
    std::vector<uintptr_t> writer_pc;
    size_t window_static = 0, window_bytes = 0;
};

static thread_local HopperBlock t_hop;

static constexpr uint32_t kPoison = 0xffffffffu;

// ----------------------------------------------------------------------------- the shared window

static size_t static_span(const Worker* w) { return (w->tls_len + 1023) / 1024 * 1024; }

static bool window_of(const Worker* w, uintptr_t a, unsigned n, unsigned* out) {
    if (w->tls_len && a - uintptr_t(w->tls_lo) < w->tls_len && a + n - uintptr_t(w->tls_lo) <= w->tls_len) {
        *out = unsigned(a - uintptr_t(w->tls_lo));
        return true;
    }
    const uintptr_t d = uintptr_t(emu_ctx.dyn_smem);
    if (w->dyn_len && a - d < w->dyn_len && a + n - d <= w->dyn_len) {
        *out = unsigned(static_span(w) + (a - d));
        return true;
    }
    return false;
}

static unsigned char* pointer_of(const Worker* w, unsigned win, unsigned n) {
    if (win < w->tls_len && win + n <= w->tls_len) return w->tls_lo + win;
    const size_t s = static_span(w);
    if (win >= s && win - s < w->dyn_len && win - s + n <= w->dyn_len) return emu_ctx.dyn_smem + (win - s);
    return nullptr;
}

// ----------------------------------------------------------------------------- block life

void hopper_block_begin(Worker* w) {
    HopperBlock& h = t_hop;
    h.bars.clear();
    h.threads.assign(size_t(w->threads), HopperThread{});
    h.inflight = 0;
    h.landings = 0;
    h.events = 0;
    h.stalled_once = false;
    h.wg_arrived.assign(size_t((w->threads + 127) / 128), 0);
    h.window_static = static_span(w);
    h.window_bytes = h.window_static + w->dyn_len;
    if (!h.writer.empty()) {  // the traced build tracks stores: start clean
        h.writer.assign((h.window_bytes + 3) / 4, 0);
        h.writer_fences.assign(h.writer.size(), 0);
        h.writer_pc.assign(h.writer.size(), 0);
    }
}

// ----------------------------------------------------------------------------- mbarrier

static std::string bar_name(const Worker* w, const MBarrier& b) {
    unsigned win = 0;
    window_of(w, b.addr, 8, &win);
    char buf[160];
    snprintf(buf, sizeof buf, "the mbarrier at shared address %u (initialised on line %d)", win, b.init_line);
    return buf;
}

static MBarrier* find_bar(uintptr_t a) {
    for (MBarrier& b : t_hop.bars)
        if (b.addr == a) return &b;
    return nullptr;
}

static MBarrier& bar_at(const char* what, void* p, int line) {
    MBarrier* b = find_bar(uintptr_t(p));
    if (b) return *b;
    if (!emu_in_shared(p, 8))
        emu_usage_error(line, "%s: %p is not in shared memory%s; an mbarrier is a 64-bit object in __shared__ memory",
                        what, p, emu_in_global(p, 8) ? " (it points into an array argument, global memory)" : "");
    emu_usage_error(line, "%s: the mbarrier at %p was never initialised: one thread must call mbarrier_init on it, "
                    "then fence_mbarrier_init() and a __syncthreads(), before any thread uses it", what, p);
}

static void land(Worker* w, const Landing& l) {
    memcpy(l.dst, l.data.data(), l.data.size());
    t_hop.landings--;
    if (t_io) t_io->s_write += l.data.size();
    unsigned win;
    HopperBlock& h = t_hop;
    if (!h.writer.empty() && window_of(w, uintptr_t(l.dst), unsigned(l.data.size()), &win))
        std::fill_n(h.writer.begin() + ptrdiff_t(win / 4), l.data.size() / 4, uint16_t(0));  // written by the async proxy
}

static void phase_complete(Worker* w, MBarrier& b) {
    // Bytes still in flight count towards the next phase, as on a GPU.
    std::vector<Landing> later;
    for (Landing& l : b.landings)
        if (l.counted) land(w, l);
        else later.push_back(std::move(l));
    b.landings = std::move(later);
    b.phase++;
    b.pending = b.count;
    b.tx = b.tx_expected = b.tx_landed = 0;
    t_hop.events++;
    if (w->vc_mode) b.released = b.known;
    b.known.clear();
    for (int i = 0; i < w->threads; ++i) {
        Fiber& f = w->fibers[i];
        if (f.state == kWaitMbar && &t_hop.bars[size_t(f.bar_id)] == &b) {
            f.state = kReady;
            f.result = 1;
        }
    }
}

// Race mode: what the arriving thread knows flows to the threads that see the phase complete.
static void race_arrive(Worker* w, MBarrier& b, const Fiber* f) {
    if (!t_race) return;
    if (!w->vc_mode) {
        w->vc_mode = true;
        w->clock.assign(size_t(w->threads), w->epoch);
        w->vc.assign(size_t(w->threads) * w->threads, w->epoch);
    }
    w->clock[f->linear]++;
    const uint32_t* row = &w->vc[size_t(f->linear) * w->threads];
    if (b.known.size() != size_t(w->threads)) b.known.assign(size_t(w->threads), 0);
    for (int u = 0; u < w->threads; ++u) b.known[u] = std::max(b.known[u], row[u]);
    b.known[f->linear] = std::max(b.known[f->linear], w->clock[f->linear]);
}

static void race_acquire(Worker* w, const MBarrier& b, const Fiber* f) {
    if (!t_race || !w->vc_mode || b.released.size() != size_t(w->threads)) return;
    uint32_t* mine = &w->vc[size_t(f->linear) * w->threads];
    for (int u = 0; u < w->threads; ++u) mine[u] = std::max(mine[u], b.released[u]);
}

// Bytes landed on barrier b (a TMA load's complete_tx).
static void complete_tx(Worker* w, MBarrier& b, unsigned bytes) {
    b.tx -= bytes;
    b.tx_landed += bytes;
    t_hop.events++;
    if (b.pending == 0 && b.tx == 0) phase_complete(w, b);
}

// A TMA load's bytes arrive as late as a GPU may let them: when a thread waits on their barrier,
// or when no thread of the block can run otherwise.
static void arrive_bytes(Worker* w, MBarrier& b) {
    for (size_t k = 0; k < b.landings.size(); ++k)
        if (!b.landings[k].counted) {
            b.landings[k].counted = true;
            complete_tx(w, b, unsigned(b.landings[k].data.size()));  // may land (and drop) the counted ones
            k = size_t(-1);  // the list changed: look again
        }
}

static const char* parity_story(const MBarrier& b, unsigned parity) {
    return (b.phase & 1) == parity ? "the current phase" : "the phase before the current one";
}

std::string hopper_waiting(const Fiber& f) {
    char buf[640];
    if (f.state == kWaitMbar) {
        const MBarrier& b = t_hop.bars[size_t(f.bar_id)];
        snprintf(buf, sizeof buf, "wait in mbarrier_try_wait_parity(parity %d) on line %d for %s, whose phase %llu "
                 "(parity %llu) waits for %d of its %d arrivals and %lld transaction bytes (%lld expected, %lld landed)",
                 f.arg, f.line, bar_name(t_worker, b).c_str(), (unsigned long long)b.phase,
                 (unsigned long long)(b.phase & 1), b.pending, b.count, (long long)b.tx, (long long)b.tx_expected,
                 (long long)b.tx_landed);
    } else {
        snprintf(buf, sizeof buf, "wait at %s on line %d (warpgroup %u: %d of its 128 threads arrived)", f.xwhat, f.line,
                 f.linear / 128, t_hop.wg_arrived[f.linear / 128]);
    }
    return buf;
}

std::string hopper_deadlock_notes(Worker* w) {
    std::string text;
    bool mbar = false, group = false;
    for (int i = 0; i < w->threads; ++i) {
        mbar |= w->fibers[i].state == kWaitMbar;
        group |= w->fibers[i].state == kWaitGroup;
    }
    if (mbar) {
        for (const MBarrier& b : t_hop.bars) {
            std::vector<int> waiting;
            for (int i = 0; i < w->threads; ++i)
                if (w->fibers[i].state == kWaitMbar && &t_hop.bars[size_t(w->fibers[i].bar_id)] == &b) waiting.push_back(i);
            if (waiting.empty()) continue;
            const unsigned parity = unsigned(w->fibers[waiting[0]].arg);
            char arrived[64] = "", expected[64] = "", buf[1200];
            if (b.last_arrive_line) snprintf(arrived, sizeof arrived, " (last arrival on line %d)", b.last_arrive_line);
            if (b.last_expect_line) snprintf(expected, sizeof expected, " (last expect_tx on line %d)", b.last_expect_line);
            snprintf(buf, sizeof buf, "%s: phase %llu has %d of %d arrivals still to come%s and %lld of %lld announced "
                     "bytes still to land%s; threads %s wait for %s (parity %u).\n", bar_name(w, b).c_str(),
                     (unsigned long long)b.phase, b.pending, b.count, arrived, (long long)(b.tx), (long long)b.tx_expected,
                     expected, thread_ranges(w, waiting).c_str(), parity_story(b, parity), parity);
            text += buf;
            if (b.tx < 0)
                text += "  More bytes landed than expect_tx announced: the expected byte count is too small (it must be "
                        "the sum of every copy's box bytes completing on this barrier in one phase).\n";
            else if (b.pending == 0 && b.tx > 0)
                text += "  All arrivals are in, but announced bytes never landed: expect_tx announced more than the "
                        "copies bring, or a copy completing on this barrier was never issued.\n";
        }
        text += "An mbarrier phase completes when all `count` arrivals of mbarrier_init have been made and every byte "
                "announced with expect_tx has landed. Waiting with parity p waits for the phase of parity p: phase k "
                "has parity k % 2, so the j-th use of a stage waits with parity j % 2 (a wrong parity waits for a "
                "phase that nobody will complete).\n";
    }
    for (int base = 0; group && base + 128 <= w->threads; base += 128) {
        if (!t_hop.wg_arrived[size_t(base / 128)]) continue;
        std::vector<int> done, elsewhere;
        for (int i = base; i < base + 128; ++i)
            if (w->fibers[i].state == kDone) done.push_back(i);
            else if (w->fibers[i].state != kWaitGroup) elsewhere.push_back(i);
        const Fiber& first = w->fibers[base];
        text += "warpgroup " + std::to_string(base / 128) + " waits at its wgmma for threads ";
        if (!done.empty()) text += thread_ranges(w, done) + ", which returned";
        if (!done.empty() && !elsewhere.empty()) text += ", and ";
        if (!elsewhere.empty()) text += thread_ranges(w, elsewhere) + ", which wait elsewhere";
        text += std::string(" (") + (first.state == kWaitGroup ? first.xwhat : "wgmma") + ").\n";
    }
    if (group)
        text += "wgmma is one instruction of a whole warpgroup: every one of the 128 threads of warps 4k..4k+3 must "
                "call it; a thread that returned early, waits elsewhere or branches around it never arrives.";
    return text;
}

bool hopper_stalled(Worker* w) {
    HopperBlock& h = t_hop;
    uint64_t sig = 1469598103934665603ull ^ h.events;
    bool sleeping = false;
    for (int i = 0; i < w->threads; ++i) {
        const Fiber& f = w->fibers[i];
        sleeping |= f.state == kWaitMbar;
        sig = (sig ^ (uint64_t(f.state) << 32 | uint32_t(f.line))) * 1099511628211ull;
    }
    bool flying = false;
    for (MBarrier& b : h.bars)
        for (const Landing& l : b.landings) flying |= !l.counted;
    if (flying) {  // progress: the copies' bytes arrive
        for (size_t i = 0; i < h.bars.size(); ++i) arrive_bytes(w, h.bars[i]);
        return true;
    }
    if (!sleeping || (h.stalled_once && sig == h.stall_sig)) return false;
    h.stalled_once = true;
    h.stall_sig = sig;
    for (int i = 0; i < w->threads; ++i)
        if (w->fibers[i].state == kWaitMbar) w->fibers[i].state = kReady, w->fibers[i].result = 0;
    return true;
}

// ----------------------------------------------------------------------------- wgmma operands

// A matrix descriptor, decoded (PTX ISA "Matrix Descriptor Format").
struct Desc {
    unsigned start, lbo, sbo, base;
    int swizzle;  // bytes: 0, 32, 64 or 128
};

static Desc decode(uint64_t d) {
    static const int kSwizzle[4] = {0, 128, 64, 32};
    return Desc{unsigned(d & 0x3fff) << 4, unsigned(d >> 16 & 0x3fff) << 4, unsigned(d >> 32 & 0x3fff) << 4,
                unsigned(d >> 49 & 7), kSwizzle[d >> 62 & 3]};
}

// The shared-window address of the 16-byte unit holding element (mn, k) of an operand with `mn`
// along M (A) or N (B), 2-byte elements (T = 8 per unit), as the canonical layouts of the PTX
// ISA ("Shared Memory Matrix Layout") place them, then swizzled: the swizzle XORs address bits
// 4.. with bits 7.. (Swizzle<1,4,3>, <2,4,3>, <3,4,3>). The element's byte in the unit is
// 2 * (k % 8) (K-major) or 2 * (mn % 8) (MN-major).
static unsigned unit_address(const Desc& d, bool mn_major, int mn, int k) {
    unsigned off;
    if (!mn_major) {  // ((8,m),(T,2k)): rows of 16 bytes (none) or of the swizzle's width
        const unsigned row = unsigned(mn % 8), group = unsigned(mn / 8), chunk = unsigned(k / 8);
        off = d.swizzle ? row * unsigned(d.swizzle) + group * d.sbo + chunk * 16
                        : row * 16 + group * d.sbo + chunk * d.lbo;
    } else {  // ((T,S,m),(8,k)): S = swizzle / 16 units of T elements along MN in one row of k
        const unsigned kr = unsigned(k % 8), kg = unsigned(k / 8);
        if (!d.swizzle) {
            off = unsigned(mn / 8) * d.sbo + kr * 16 + kg * d.lbo;
        } else {
            const unsigned units = unsigned(d.swizzle) / 16;
            const unsigned unit = unsigned(mn / 8) % units, atom = unsigned(mn / 8) / units;
            off = unit * 16 + atom * d.lbo + kr * unsigned(d.swizzle) + kg * d.sbo;
        }
    }
    const unsigned a = d.start + off;
    const unsigned bits = d.swizzle == 128 ? 7u : d.swizzle == 64 ? 3u : d.swizzle == 32 ? 1u : 0u;
    return a ^ ((a >> 7 & bits) << 4);
}

// Generic-proxy stores that the async proxy would read without a fence.proxy.async (traced build).
[[noreturn]] static void report_unfenced(Worker* w, const char* what, int line, size_t word, const char* operand) {
    HopperBlock& h = t_hop;
    const int writer = h.writer[word] - 1;
    claim_report();
    fill_location(g_err);
    g_err->kind = kUsage;
    g_err->line = -1;  // Python finds the store's line from its code address
    g_err->pc = h.writer_pc[word] - 1;
    g_err->addr = word * 4;
    snprintf(g_err->text, sizeof g_err->text,
             "%s on line %d reads its %s from shared memory (window byte %zu) that thread %s wrote here with an ordinary "
             "store and did not make visible to the async proxy: wgmma and TMA read shared memory through the async "
             "proxy, so each thread that writes an operand with ordinary stores must execute fence_proxy_async() after "
             "its stores and before the barrier (__syncthreads() or mbarrier) that hands the tile over",
             what, line, operand, word * 4, thread_name(w, writer).c_str());
    finish_report();
}

// The async proxy reads 16 bytes at window address win: each word written by an ordinary store
// needs a fence.proxy.async by its writer since (traced build, which sees the stores).
static void check_async_read(Worker* w, const char* what, int line, unsigned win, const char* operand) {
    HopperBlock& h = t_hop;
    if (h.writer.empty()) return;
    for (size_t word = win / 4; word < win / 4 + 4 && word < h.writer.size(); ++word)
        if (h.writer[word] && h.threads[h.writer[word] - 1].proxy_fences == h.writer_fences[word])
            report_unfenced(w, what, line, word, operand);
}

// Check and read one 16-byte unit of an operand.
static const unsigned char* read_unit(Worker* w, const char* what, int line, const char* operand, unsigned win,
                                      uintptr_t ret) {
    unsigned char* p = pointer_of(w, win, 16);
    if (!p)
        emu_usage_error(line, "%s: the %s descriptor reaches shared-window byte %u, outside the block's shared memory "
                        "(%zu bytes of static __shared__ at 0, dynamic shared memory from %zu): its start address, "
                        "leading or stride byte offset does not describe the tile", what, operand, win,
                        size_t(w->tls_len), t_hop.window_static);
    check_async_read(w, what, line, win, operand);
    if (w->async_inflight) async_access(w, uintptr_t(p), 16, false, ret);
    if (t_io) t_io->s_read += 16;
    if (t_race) race_access(uintptr_t(p), 16, kAccRead, ret);
    return p;
}

// ----------------------------------------------------------------------------- wgmma

static Accumulator* inflight_of(HopperThread& t, const float* d) {
    for (Accumulator& a : t.inflight)
        if (a.d == d) return &a;
    return nullptr;
}

static void check_issue(Worker* w, const Fiber* f, const emu_wgmma_op* op, int line) {
    HopperThread& t = t_hop.threads[f->linear];
    if (!t.fenced_ever)
        emu_usage_error(line, "%s: thread %s issues a wgmma without a wgmma_fence() before it: every thread of the "
                        "warpgroup must execute wgmma_fence() before its first wgmma, and again between touching "
                        "accumulator or A registers and the next wgmma that uses them", op->what,
                        thread_name(w, int(f->linear)).c_str());
    if (t.fenced_since_wait || inflight_of(t, op->d)) return;
    for (const Returned& r : t.returned)
        if (r.d == op->d && memcmp(r.v, op->d, size_t(r.n) * 4) != 0)
            emu_usage_error(line, "%s: thread %s changed these accumulator registers after wgmma_wait_group on line %d "
                            "returned them, and no wgmma_fence() came between that and this wgmma: the wgmma may read "
                            "them before the change lands. Call wgmma_fence() before the wgmmas that follow register "
                            "accesses", op->what, thread_name(w, int(f->linear)).c_str(), r.wait_line);
}

// A warpgroup instruction (.sync.aligned over 4 warps): every one of the 128 threads arrives with
// `in`; true for the last to arrive, which completes it for all, checking first that all met at
// one call. The others sleep until then.
static bool warpgroup_meet(Worker* w, Fiber* f, const char* what, const void* in, int line) {
    const int base = int(f->linear) & ~127;
    if (base + 128 > w->threads)
        emu_usage_error(line, "%s: thread %s is in warpgroup %d (threads %d..%d), but the block has %d threads: %s "
                        "needs all 128 threads of 4 consecutive warps, the first a multiple of 4 (blocks of a multiple "
                        "of 128 threads)", what, thread_name(w, int(f->linear)).c_str(), base / 128, base, base + 127,
                        w->threads, what);
    std::vector<int> done;
    for (int i = base; i < base + 128; ++i)
        if (w->fibers[i].state == kDone) done.push_back(i);
    if (!done.empty())
        emu_usage_error(line, "%s: threads %s of warpgroup %d have already returned, so they never join this %s: all "
                        "128 threads of the warpgroup must execute it (do not return early; guard loads and stores, "
                        "not the %s)", what, thread_ranges(w, done).c_str(), base / 128, what, what);
    f->xin = in;
    f->xwhat = what;
    f->line = line;
    f->state = kWaitGroup;
    if (++t_hop.wg_arrived[size_t(base / 128)] < 128) {
        fiber_yield(w);
        return false;
    }
    t_hop.wg_arrived[size_t(base / 128)] = 0;
    for (int i = 0; i < 128; ++i) {
        const Fiber& o = w->fibers[base + i];
        if (o.line != w->fibers[base].line || strcmp(o.xwhat, w->fibers[base].xwhat) != 0)
            emu_usage_error(line, "threads of warpgroup %d meet at different calls: thread %s at %s on line %d, thread "
                            "%s at %s on line %d; all 128 threads must execute the same warpgroup instruction together",
                            base / 128, thread_name(w, base).c_str(), w->fibers[base].xwhat, w->fibers[base].line,
                            thread_name(w, base + i).c_str(), o.xwhat, o.line);
    }
    return true;
}

// The warpgroup goes on, as after a barrier, in schedule order.
static void warpgroup_release(Worker* w, int base) {
    for (int i = base; i < base + 128; ++i) w->fibers[i].state = kReady;
    fiber_yield(w);
}

static void warpgroup_complete(Worker* w, int base, int line, uintptr_t ret) {
    const emu_wgmma_op* op0 = static_cast<const emu_wgmma_op*>(w->fibers[base].xin);
    for (int i = 0; i < 128; ++i) {
        const Fiber& o = w->fibers[base + i];
        const emu_wgmma_op* op = static_cast<const emu_wgmma_op*>(o.xin);
        if ((!op->rs && op->desc_a != op0->desc_a) || op->desc_b != op0->desc_b || op->scale_d != op0->scale_d)
            emu_usage_error(line, "%s: thread %s passes %s 0x%016llx, thread %s 0x%016llx: the descriptors and scale_d "
                            "must be the same in every thread of the warpgroup (one matrix multiply reads them once)",
                            op0->what, thread_name(w, base + i).c_str(),
                            op->desc_b != op0->desc_b ? "desc_b" : op->scale_d != op0->scale_d ? "scale_d" : "desc_a",
                            (unsigned long long)(op->desc_b != op0->desc_b ? op->desc_b : op->scale_d != op0->scale_d ? uint64_t(op->scale_d) : op->desc_a),
                            thread_name(w, base).c_str(),
                            (unsigned long long)(op->desc_b != op0->desc_b ? op0->desc_b : op->scale_d != op0->scale_d ? uint64_t(op0->scale_d) : op0->desc_a));
    }
    const int n = op0->n;
    const bool bf16 = op0->bf16;
    static thread_local double A[64][16], B[16][256];
    auto load = [&](const char* operand, uint64_t raw, bool mn_major, int rows, auto put) {
        const Desc d = decode(raw);
        if (d.base)
            emu_usage_error(line, "%s: the %s descriptor has base offset %u; the emulator models base offset 0 only (a "
                            "swizzled tile whose pattern starts at a multiple of its repeat: 1024 bytes for 128B, 512 "
                            "for 64B, 256 for 32B), which is what a tile aligned to that boundary needs", op0->what,
                            operand, d.base);
        if (!mn_major) {
            for (int r = 0; r < rows; ++r)
                for (int c = 0; c < 2; ++c) {
                    const unsigned char* p = read_unit(w, op0->what, line, operand, unit_address(d, false, r, 8 * c), ret);
                    for (int e = 0; e < 8; ++e) put(r, 8 * c + e, unsigned(p[2 * e]) | unsigned(p[2 * e + 1]) << 8);
                }
        } else {
            for (int r = 0; r < rows; r += 8)
                for (int k = 0; k < 16; ++k) {
                    const unsigned char* p = read_unit(w, op0->what, line, operand, unit_address(d, true, r, k), ret);
                    for (int e = 0; e < 8; ++e) put(r + e, k, unsigned(p[2 * e]) | unsigned(p[2 * e + 1]) << 8);
                }
        }
    };
    auto value = [&](unsigned bits) { return bf16 ? emu::widen<true>(bits) : emu::widen<false>(bits); };
    if (op0->rs) {
        for (int i = 0; i < 128; ++i) {
            const unsigned* a = static_cast<const emu_wgmma_op*>(w->fibers[base + i].xin)->a;
            const int warp = i / 32, g = i % 32 / 4, q = i % 4;
            for (int r = 0; r < 4; ++r)
                for (int half = 0; half < 2; ++half)
                    A[16 * warp + g + 8 * (r % 2)][2 * q + half + 8 * (r / 2)] = value(a[r] >> 16 * half);
        }
    } else {
        load("A", op0->desc_a, op0->trans_a, 64, [&](int m, int k, unsigned bits) { A[m][k] = value(bits); });
    }
    load("B", op0->desc_b, op0->trans_b, n, [&](int nn, int k, unsigned bits) { B[k][nn] = value(bits); });
    HopperBlock& h = t_hop;
    for (int i = 0; i < 128; ++i) {
        Fiber& o = w->fibers[base + i];
        const emu_wgmma_op* op = static_cast<const emu_wgmma_op*>(o.xin);
        HopperThread& t = h.threads[o.linear];
        Accumulator* acc = inflight_of(t, op->d);
        if (!acc) {
            t.inflight.push_back(Accumulator{op->d, n, 0, 0, nullptr, {}});
            acc = &t.inflight.back();
            memcpy(acc->v, op->d, size_t(n) * 2);
            h.inflight++;
        } else if (acc->n != n) {
            emu_usage_error(o.line, "%s: these accumulators are still in flight from a wgmma with N = %d on line %d; a "
                            "chain of wgmmas into one accumulator uses one shape", op->what, acc->n * 2, acc->line);
        }
        const int warp = i / 32, g = i % 32 / 4, q = i % 4;
        for (int r = 0; r < n / 2; ++r) {
            const int row = 16 * warp + g + 8 * (r / 2 % 2), col = 8 * (r / 4) + 2 * q + r % 2;
            double s = op->scale_d ? double(acc->v[r]) : 0.0;
            for (int k = 0; k < 16; ++k) s += A[row][k] * B[k][col];
            acc->v[r] = float(s);
        }
        acc->group = t.committed;
        acc->line = o.line;
        acc->a = op->rs ? op->a : nullptr;
        std::fill_n(reinterpret_cast<uint32_t*>(op->d), n / 2, kPoison);
    }
}

}  // namespace launcher

extern "C" {

using namespace launcher;

unsigned emu_smem_window(const void* p, int line) {
    unsigned win = 0;
    if (!window_of(t_worker, uintptr_t(p), 1, &win))
        emu_usage_error(line, "__cvta_generic_to_shared(%p): not a shared-memory address%s", p,
                        emu_in_global(p, 1) ? " (it points into an array argument, global memory)" : "");
    return win;
}

void* emu_smem_pointer(unsigned window, unsigned bytes, int line) {
    unsigned char* p = pointer_of(t_worker, window, bytes ? bytes : 1);
    if (!p) emu_usage_error(line, "shared-window address %u is outside the block's shared memory", window);
    return p;
}

void emu_mbarrier_init(void* bar, unsigned count, int line) {
    Worker* w = t_worker;
    if (!emu_in_shared(bar, 8))
        emu_usage_error(line, "mbarrier_init: %p is not in shared memory%s; an mbarrier is a 64-bit object in "
                        "__shared__ memory", bar, emu_in_global(bar, 8) ? " (it points into an array argument)" : "");
    if (uintptr_t(bar) % 8)
        emu_usage_error(line, "mbarrier_init: %p is not 8-byte aligned (declare the barrier as unsigned long long, or "
                        "__align__(8))", bar);
    if (count < 1 || count > (1u << 20) - 1)
        emu_usage_error(line, "mbarrier_init(bar, %u): the arrival count must be 1..%u", count, (1u << 20) - 1);
    MBarrier* b = find_bar(uintptr_t(bar));
    if (b) {
        for (int i = 0; i < w->threads; ++i)
            if (w->fibers[i].state == kWaitMbar && &t_hop.bars[size_t(w->fibers[i].bar_id)] == b)
                emu_usage_error(line, "mbarrier_init: %s is initialised again while thread %s waits on it (line %d)",
                                bar_name(w, *b).c_str(), thread_name(w, i).c_str(), w->fibers[i].line);
    } else {
        t_hop.bars.push_back(MBarrier{});
        b = &t_hop.bars.back();
    }
    *b = MBarrier{uintptr_t(bar), int(count), int(count), 0, 0, 0, 0, line, 0, 0, {}, {}};
    memset(bar, 0, 8);
    t_hop.events++;
}

uint64_t emu_mbarrier_arrive(void* bar, unsigned tx, int kind, int line) {
    static const char* names[] = {"mbarrier_arrive", "mbarrier_arrive_expect_tx", "mbarrier_expect_tx"};
    Worker* w = t_worker;
    Fiber* f = cur_fiber();
    MBarrier& b = bar_at(names[kind], bar, line);
    if (kind && tx > (1u << 20) - 1)
        emu_usage_error(line, "%s(bar, %u): a phase's transaction count is at most %u bytes", names[kind], tx, (1u << 20) - 1);
    if (kind) {
        b.tx += tx;
        b.tx_expected += tx;
        b.last_expect_line = line;
    }
    const uint64_t token = b.phase;
    t_hop.events++;
    if (kind == 2) return token;
    if (b.pending == 0)
        emu_usage_error(line, "%s: thread %s arrives at %s in phase %llu, which already has all %d of its arrivals and "
                        "waits only for %lld announced bytes: an arrival too many (the count given to mbarrier_init "
                        "must be the number of arrivals each phase gets)", names[kind], thread_name(w, int(f->linear)).c_str(),
                        bar_name(w, b).c_str(), (unsigned long long)b.phase, b.count, (long long)b.tx);
    race_arrive(w, b, f);
    b.pending--;
    b.last_arrive_line = line;
    if (b.pending == 0 && b.tx == 0) phase_complete(w, b);
    return token;
}

int emu_mbarrier_try_wait_parity(void* bar, unsigned parity, int line) {
    Worker* w = t_worker;
    Fiber* f = cur_fiber();
    MBarrier& b = bar_at("mbarrier_try_wait_parity", bar, line);
    if (parity > 1)
        emu_usage_error(line, "mbarrier_try_wait_parity(bar, %u): the parity is 0 or 1 (phase k has parity k %% 2)", parity);
    arrive_bytes(w, b);
    if ((b.phase & 1) != parity) {
        race_acquire(w, b, f);
        return 1;
    }
    f->state = kWaitMbar;
    f->line = line;
    f->bar_id = int(&b - t_hop.bars.data());
    f->arg = int(parity);
    fiber_yield(w);
    if (f->result) race_acquire(w, t_hop.bars[size_t(f->bar_id)], f);
    return int(f->result);
}

void emu_fence_proxy_async(int) { t_hop.threads[cur_fiber()->linear].proxy_fences++; }

void emu_fence_mbarrier_init(int) {}

void emu_wgmma_fence(int line) {
    HopperThread& t = t_hop.threads[cur_fiber()->linear];
    t.fenced_ever = t.fenced_since_wait = true;
    t.fence_line = line;
}

void emu_wgmma_commit(int) { t_hop.threads[cur_fiber()->linear].committed++; }

void emu_wgmma_wait(int pending, int line) {
    Worker* w = t_worker;
    Fiber* f = cur_fiber();
    if (pending < 0 || pending > 7)
        emu_usage_error(line, "wgmma_wait_group<%d>: N, the groups left pending, is 0..7", pending);
    HopperThread& t = t_hop.threads[f->linear];
    const uint64_t limit = t.committed > uint64_t(pending) ? t.committed - uint64_t(pending) : 0;
    size_t keep = 0;
    for (size_t k = 0; k < t.inflight.size(); ++k) {
        Accumulator& a = t.inflight[k];
        if (a.group >= limit) {
            t.inflight[keep++] = a;
            continue;
        }
        for (int r = 0; r < a.n / 2; ++r)
            if (reinterpret_cast<const uint32_t*>(a.d)[r] != kPoison)
                emu_usage_error(line, "wgmma_wait_group<%d>: thread %s wrote accumulator register %d while it was in "
                                "flight from the wgmma on line %d (between the wgmma and this wait): the wgmma writes "
                                "them when it completes, so the write is lost or lands in no defined order", pending,
                                thread_name(w, int(f->linear)).c_str(), r, a.line);
        memcpy(a.d, a.v, size_t(a.n) * 2);
        auto same = std::find_if(t.returned.begin(), t.returned.end(), [&](const Returned& r) { return r.d == a.d; });
        Returned& r = same != t.returned.end() ? *same : t.returned.emplace_back();
        r.d = a.d;
        r.n = a.n / 2;
        r.wait_line = line;
        memcpy(r.v, a.v, size_t(a.n) * 2);
        t_hop.inflight--;
    }
    t.inflight.resize(keep);
    t.fenced_since_wait = false;
    t.wait_line = line;
}

void emu_wgmma(const emu_wgmma_op* op, int line) {
    const uintptr_t ret = uintptr_t(__builtin_return_address(0));
    Worker* w = t_worker;
    Fiber* f = cur_fiber();
    if (int(f->linear & ~127u) + 128 <= w->threads) check_issue(w, f, op, line);
    if (!warpgroup_meet(w, f, op->what, op, line)) return;
    const int base = int(f->linear) & ~127;
    warpgroup_complete(w, base, line, ret);
    warpgroup_release(w, base);
}

// setmaxnreg: the value is a template argument, so its range is checked at compile time (both
// backends); here, that the whole warpgroup executes it together, with one value.
void emu_setmaxnreg(int regs, int inc, int line) {
    Worker* w = t_worker;
    Fiber* f = cur_fiber();
    const char* what = inc ? "setmaxnreg_inc" : "setmaxnreg_dec";
    const int mine = inc ? regs : -regs;  // the thread's request, on its stack while it waits
    if (!warpgroup_meet(w, f, what, &mine, line)) return;
    const int base = int(f->linear) & ~127;
    const int first = *static_cast<const int*>(w->fibers[base].xin);
    for (int i = 0; i < 128; ++i) {
        const int other = *static_cast<const int*>(w->fibers[base + i].xin);
        if (other != first)
            emu_usage_error(line, "%s: thread %s asks for %d registers, thread %s for %d: every thread of warpgroup %d "
                            "must execute the same setmaxnreg (.sync.aligned)", what, thread_name(w, base).c_str(),
                            std::abs(first), thread_name(w, base + i).c_str(), std::abs(other), base / 128);
    }
    warpgroup_release(w, base);
}

}  // extern "C"

namespace launcher {

// ----------------------------------------------------------------------------- TMA

// grader.TensorMap's emulator layout (grader/tensor_map.py): the array is argument `arg`.
struct TmaMap {
    uint32_t magic, rank, elem, swizzle, arg, pad;
    uint64_t dims[5], strides[5];
    uint32_t box[5];
};
static_assert(sizeof(TmaMap) <= 128);
constexpr uint32_t kTmaMagic = 0x50414D54;

static const TmaMap& map_at(const char* what, const void* map, int rank, int line) {
    const Launch& L = g_launch;
    if (!emu_in_global(map, 128))
        emu_usage_error(line, "%s: the tensor map %p is not 128 bytes of an array argument: pass a grader.TensorMap "
                        "as the kernel's `const CUtensorMap*` argument", what, map);
    const TmaMap& m = *static_cast<const TmaMap*>(map);
    if (m.magic != kTmaMagic || m.arg >= unsigned(L.nargs))
        emu_usage_error(line, "%s: %p holds no tensor map made by grader.TensorMap (its 128 bytes describe no array of "
                        "the launch)", what, map);
    if (int(m.rank) != rank)
        emu_usage_error(line, "%s: the tensor map has %u dimensions, this copy gives %d coordinates", what, m.rank, rank);
    return m;
}

// Each element of the box: its byte in shared memory (swizzled as the map says, on the shared-window
// address) and its global address (null out of bounds).
template <class F>
static void for_box(const Worker* w, const TmaMap& m, const int* coords, unsigned smem_win, F f) {
    const Launch& L = g_launch;
    uint64_t total = 1;
    for (uint32_t d = 0; d < m.rank; ++d) total *= m.box[d];
    const unsigned bits = m.swizzle == 128 ? 7u : m.swizzle == 64 ? 3u : m.swizzle == 32 ? 1u : 0u;
    unsigned char* base = reinterpret_cast<unsigned char*>(L.arg_lo[m.arg]);
    for (uint64_t e = 0; e < total; ++e) {
        uint64_t rest = e, offset = 0;
        bool inside = true;
        for (uint32_t d = 0; d < m.rank; ++d) {
            const int64_t g = int64_t(coords[d]) + int64_t(rest % m.box[d]);
            rest /= m.box[d];
            inside &= g >= 0 && uint64_t(g) < m.dims[d];
            offset += uint64_t(g) * m.strides[d];
        }
        const unsigned a = smem_win + unsigned(e * m.elem);
        f(a ^ ((a >> 7 & bits) << 4), inside ? base + offset : nullptr);
    }
    (void)w;
}

static unsigned box_bytes(const TmaMap& m) {
    unsigned n = m.elem;
    for (uint32_t d = 0; d < m.rank; ++d) n *= m.box[d];
    return n;
}

static unsigned tma_smem(const Worker* w, const char* what, const void* p, unsigned bytes, int line) {
    unsigned win;
    if (!window_of(w, uintptr_t(p), bytes, &win))
        emu_usage_error(line, "%s: the box (%u bytes from %p) is not all in shared memory%s", what, bytes, p,
                        emu_in_global(p, 1) ? " (it points into an array argument)" : "");
    if (win % 128)
        emu_usage_error(line, "%s: shared address %u is not a multiple of 128 bytes, as a bulk tensor copy needs (and a "
                        "swizzled box's pattern repeats every 8 rows: 1024 bytes for the 128-byte swizzle)", what, win);
    return win;
}

}  // namespace launcher

extern "C" {

using namespace launcher;

void emu_tma_load(void* dst, const void* map, const int* coords, int rank, void* bar, int line) {
    static const char* names[] = {"", "tma_load_1d", "tma_load_2d", "tma_load_3d", "tma_load_4d", "tma_load_5d"};
    Worker* w = t_worker;
    const TmaMap& m = map_at(names[rank], map, rank, line);
    MBarrier& b = bar_at(names[rank], bar, line);
    const unsigned bytes = box_bytes(m), win = tma_smem(w, names[rank], dst, bytes, line);
    Landing l{static_cast<unsigned char*>(dst), std::vector<unsigned char>(bytes, 0), line, false};
    uint64_t read = 0;
    for_box(w, m, coords, win, [&](unsigned a, const unsigned char* g) {
        if (g) memcpy(&l.data[a - win], g, m.elem), read += m.elem;
    });
    if (t_io) t_io->g_read[m.arg] += read;
    memset(dst, 0xff, bytes);
    b.landings.push_back(std::move(l));
    t_hop.landings++;
}

void emu_tma_store(const void* map, const int* coords, int rank, const void* src, int line) {
    static const char* names[] = {"", "tma_store_1d", "tma_store_2d", "tma_store_3d", "tma_store_4d", "tma_store_5d"};
    Worker* w = t_worker;
    Fiber* f = cur_fiber();
    const TmaMap& m = map_at(names[rank], map, rank, line);
    const unsigned bytes = box_bytes(m), win = tma_smem(w, names[rank], src, bytes, line);
    for (unsigned u = win; u < win + bytes; u += 16) check_async_read(w, names[rank], line, u, "source");
    HopperThread& t = t_hop.threads[f->linear];
    BulkStore st{t.bulk_committed, m.elem, {}};
    const unsigned char* s = static_cast<const unsigned char*>(src);
    for_box(w, m, coords, win, [&](unsigned a, unsigned char* g) {
        if (!g) return;
        uint64_t v = 0;
        memcpy(&v, s + (a - win), m.elem);
        st.values.push_back({g, v});
    });
    if (t_io) t_io->s_read += bytes, t_io->g_write[m.arg] += st.values.size() * m.elem;
    t.stores.push_back(std::move(st));
}

void emu_bulk_commit(int) { t_hop.threads[cur_fiber()->linear].bulk_committed++; }

void emu_bulk_wait(int pending, int line) {
    if (pending < 0 || pending > 63)
        emu_usage_error(line, "cp_async_bulk_wait_group<%d>: N, the groups left pending, is 0..63", pending);
    HopperThread& t = t_hop.threads[cur_fiber()->linear];
    const uint64_t limit = t.bulk_committed > uint64_t(pending) ? t.bulk_committed - uint64_t(pending) : 0;
    size_t keep = 0;
    for (BulkStore& st : t.stores) {
        if (st.group >= limit) {
            t.stores[keep++] = std::move(st);
            continue;
        }
        for (auto& [g, v] : st.values) memcpy(g, &v, st.elem);
    }
    t.stores.resize(keep);
}

}  // extern "C"

namespace launcher {

void hopper_thread_done(Worker*, Fiber* f) {
    if (t_hop.threads.size() <= f->linear) return;
    HopperThread& t = t_hop.threads[f->linear];
    // A GPU completes a returned thread's bulk stores too.
    for (BulkStore& st : t.stores)
        for (auto& [g, v] : st.values) memcpy(g, &v, st.elem);
    t.stores.clear();
}

// A traced access (its hook's return address `ret`) that a Hopper rule forbids: Python names its line.
[[noreturn]] static void report_access(uintptr_t ret, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
[[noreturn]] static void report_access(uintptr_t ret, const char* fmt, ...) {
    claim_report();
    fill_location(g_err);
    g_err->kind = kUsage;
    g_err->line = -1;
    g_err->pc = ret - 1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_err->text, sizeof g_err->text, fmt, ap);
    va_end(ap);
    finish_report();
}

void hopper_access(Worker* w, uintptr_t a, unsigned size, bool store, uintptr_t ret) {
    HopperBlock& h = t_hop;
    const Fiber* f = cur_fiber();
    if (!f) return;
    if (h.inflight) {
        const HopperThread& t = h.threads[f->linear];
        for (const Accumulator& acc : t.inflight) {
            const bool in_d = a < uintptr_t(acc.d + acc.n / 2) && a + size > uintptr_t(acc.d);
            const bool in_a = store && acc.a && a < uintptr_t(acc.a + 4) && a + size > uintptr_t(acc.a);
            if (!in_d && !in_a) continue;
            report_access(ret, "%s of %s still in flight from the wgmma on line %d: a wgmma's accumulators belong to "
                          "the tensor cores from the wgmma until the wgmma_wait_group that retires its group "
                          "(wgmma_commit_group() closes a group; wgmma_wait_group<N>() waits until at most N groups "
                          "are pending)%s", store ? "write" : "read",
                          in_d ? "wgmma accumulator registers" : "the A registers of a wgmma", acc.line,
                          in_d ? "" : "; the A fragment must stay unchanged until then too");
        }
    }
    if (h.landings)
        for (const MBarrier& b : h.bars)
            for (const Landing& l : b.landings)
                if (a < uintptr_t(l.dst) + l.data.size() && a + size > uintptr_t(l.dst))
                    report_access(ret, "%s of shared memory that the TMA load on line %d has not written yet: its "
                                  "bytes land when phase %llu of %s completes; wait for it first (while "
                                  "(!mbarrier_try_wait_parity(bar, %llu)) {})", store ? "write" : "read", l.line,
                                  (unsigned long long)b.phase, bar_name(w, b).c_str(), (unsigned long long)(b.phase & 1));
    if (!store) return;
    unsigned win;
    if (!window_of(w, a, size, &win)) return;
    if (h.writer.empty()) {
        h.writer.assign((h.window_bytes + 3) / 4, 0);
        h.writer_fences.assign(h.writer.size(), 0);
        h.writer_pc.assign(h.writer.size(), 0);
    }
    for (size_t word = win / 4; word <= (win + size - 1) / 4 && word < h.writer.size(); ++word) {
        h.writer[word] = uint16_t(f->linear + 1);
        h.writer_fences[word] = h.threads[f->linear].proxy_fences;
        h.writer_pc[word] = ret;
    }
}

}  // namespace launcher
