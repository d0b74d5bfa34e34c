// async.cpp: cp.async, deferred: a copy is read at issue and lands at the wait that retires it.
//
// Each thread keeps its copies not yet landed (AsyncCopies, hung on its Fiber) in issue order,
// each tagged with its group: the number of cp_async_commit() calls the thread had made before
// it. Group numbers only grow, so a wait retires a prefix of the list. While a copy is in flight
// its destination holds 0xFF bytes (NaN as float), so a read before the wait spoils the results
// of the normal build; the traced build checks every load and store against a map of the block's
// shared memory (per 4-byte word: which thread has a copy in flight there) and names the access.
//
// For the traced build's IO counts, race detector and profiler, a copy is a global read at issue
// (a traced load in emu_async.hpp, on the student's line) and a shared write by the issuing thread
// where it lands, booked here at the return address of the wait: the student's wait, since the
// header inlines its calls. For the race detector the write is also checked at issue: on a GPU the
// bytes may land any time between the issue and the wait. Accesses in between are the in-flight
// check's; the source is not watched after issue (a kernel that writes its own cp.async source
// while the copy is in flight is not caught).
#include <memory>

#include "launcher.hpp"

namespace launcher {

struct AsyncCopy {
    unsigned char* dst;
    unsigned bytes;
    int line;
    uint64_t group;
    uint32_t waits;  // waits the thread had made before this copy
    uintptr_t ret;  // the return address in the kernel library: the write's site if it lands at exit
    unsigned char data[16];
};

struct AsyncCopies {
    std::vector<AsyncCopy> pending;  // issue order
    uint64_t committed = 0;  // groups closed; the open group's number
    uint32_t waits = 0;
    int wait_line = 0, wait_keep = 0;  // the last wait: its line and N
    uint64_t committed_at_wait = 0;  // the groups committed when the last wait ran

    // The groups below this have landed (at the last wait).
    uint64_t retired() const { return committed_at_wait > uint64_t(wait_keep) ? committed_at_wait - uint64_t(wait_keep) : 0; }
};

// Per OS thread, which runs one block at a time.
struct AsyncBlock {
    std::vector<std::unique_ptr<AsyncCopies>> threads;  // by linear thread index, kept across blocks
    // Per 4-byte word of shared memory (static part, then dynamic part): 1 + the linear index of
    // the thread with a copy in flight there, else 0. All zero between blocks: every copy lands by
    // the time its thread returns.
    std::vector<uint16_t> owner;
    uintptr_t static_lo = 0;  // the static part's first word: tls_lo rounded down to 4 bytes
    size_t static_words = 0, words = 0;
};

static thread_local AsyncBlock t_async;

static constexpr size_t kNoWord = ~size_t(0);

static size_t word_of(const AsyncBlock& s, uintptr_t a) {
    if (a - s.static_lo < s.static_words * 4) return (a - s.static_lo) / 4;
    const uintptr_t d = a - uintptr_t(emu_ctx.dyn_smem);
    if (d < (s.words - s.static_words) * 4) return s.static_words + d / 4;
    return kNoWord;
}

// The copy in flight at `word` of shared memory, among thread `linear`'s (whom owner names).
static const AsyncCopy& copy_at(const Worker* w, int linear, size_t word) {
    const std::vector<AsyncCopy>& pending = w->fibers[size_t(linear)].async->pending;
    for (const AsyncCopy& c : pending) {
        const size_t k = word_of(t_async, uintptr_t(c.dst));
        if (k <= word && word < k + c.bytes / 4) return c;
    }
    return pending.front();  // not reached: owner names only threads with a copy there
}

static AsyncCopies* copies_of(Fiber* f) {
    if (f->async) return f->async;
    auto& v = t_async.threads;
    if (v.size() <= f->linear) v.resize(f->linear + 1);
    if (!v[f->linear]) v[f->linear] = std::make_unique<AsyncCopies>();
    return f->async = v[f->linear].get();
}

static void land(Worker* w, const AsyncCopy& c, uintptr_t ret) {
    memcpy(c.dst, c.data, c.bytes);
    const size_t k = word_of(t_async, uintptr_t(c.dst));
    std::fill_n(t_async.owner.begin() + ptrdiff_t(k), c.bytes / 4, uint16_t(0));
    w->async_inflight--;
    if (t_io) t_io->s_write += c.bytes;
    if (t_race) race_access(uintptr_t(c.dst), c.bytes, kAccWrite, ret);
    if (t_prof) prof_access(t_prof, uintptr_t(c.dst), c.bytes, true, ret);
}

// Land the thread's copies of groups below `limit`.
static void retire(Worker* w, AsyncCopies* a, uint64_t limit, uintptr_t ret) {
    size_t k = 0;
    for (; k < a->pending.size() && a->pending[k].group < limit; ++k) land(w, a->pending[k], ret);
    a->pending.erase(a->pending.begin(), a->pending.begin() + ptrdiff_t(k));
}

void async_block_begin(Worker* w) {
    AsyncBlock& s = t_async;
    s.static_lo = uintptr_t(w->tls_lo) & ~uintptr_t(3);
    s.static_words = w->tls_len ? (uintptr_t(w->tls_lo) + w->tls_len - s.static_lo + 3) / 4 : 0;
    s.words = s.static_words + (w->dyn_len + 3) / 4;
    w->async_inflight = 0;
}

void async_thread_done(Worker* w, Fiber* f) {
    AsyncCopies* a = f->async;
    if (!a) return;
    // A GPU completes a returned thread's copies too; they land now, booked at their issue.
    for (const AsyncCopy& c : a->pending) land(w, c, c.ret);
    a->pending.clear();
    a->committed = 0;
    a->waits = 0;
    a->wait_line = a->wait_keep = 0;
    a->committed_at_wait = 0;
}

// Where a pipeline's refill goes: every message that suspects a stage index states it the same way.
static constexpr const char* kRefillRule =
    "with STAGES buffers, tile j + STAGES - 1 goes to stage (j + STAGES - 1) % STAGES, the one tile j - 1 used";

// The traced build: an access to bytes that a copy has not written yet.
[[noreturn]] static void report_in_flight(Worker* w, size_t word, uintptr_t addr, bool store, uintptr_t ret) {
    const int issuer = t_async.owner[word] - 1;
    const Fiber* me = cur_fiber();
    const AsyncCopies* a = w->fibers[size_t(issuer)].async;
    const AsyncCopy* c = &copy_at(w, issuer, word);
    const bool own = me && int(me->linear) == issuer;
    const std::string who = thread_name(w, issuer);
    const char* what = store ? "write" : "read";
    char why[640];
    // Which story fits: a wait too lenient for the groups committed, or a copy issued after the
    // thread's last wait into bytes read now (a refill of the stage in use, or a read that strays
    // out of its own stage), or no wait at all.
    enum { kOpen, kLenient, kAfterWait, kNoWait } story;
    // Commits since the last wait, and the same wait issued now would retire this copy: the access
    // comes before the wait meant for it, not after one that is too lenient.
    const uint64_t committed_at_wait = a->committed_at_wait;
    const bool before_its_wait = a->committed > committed_at_wait && a->committed - uint64_t(a->wait_keep) > c->group;
    if (c->group == a->committed) {
        story = kOpen;
        snprintf(why, sizeof why, "its group is still open (no cp_async_commit() after it), and a wait retires only committed groups");
    } else if (a->waits > c->waits) {
        story = kLenient;
        snprintf(why, sizeof why, "cp_async_wait<%d> on line %d retires only the groups older than the newest %d, and this copy is in one of the newest, left in flight "
                 "(by then the thread had committed %llu group(s), numbered from 0; this copy is in group %llu)",
                 a->wait_keep, a->wait_line, a->wait_keep, (unsigned long long)committed_at_wait, (unsigned long long)c->group);
    } else if (!own && me && me->async && me->async->retired() > c->group) {
        // The reader has waited for its own copies of this group: it expects these bytes to have
        // landed, which only a barrier after the issuer's wait makes true.
        story = kNoWait;
        snprintf(why, sizeof why, "thread %s has made no cp_async_wait since issuing it, while this thread's own wait "
                 "(line %d) covers the same group", who.c_str(), me->async->wait_line);
    } else if (a->waits > 0) {
        story = kAfterWait;
        snprintf(why, sizeof why, "%s issued it after %s last cp_async_wait (line %d) and has not waited since",
                 own ? "this thread" : ("thread " + who).c_str(), own ? "its" : "that thread's", a->wait_line);
    } else {
        story = kNoWait;
        snprintf(why, sizeof why, "%s has made no cp_async_wait since issuing it", own ? "this thread" : ("thread " + who).c_str());
    }
    char fix[1400];
    if (own && story == kAfterWait)
        snprintf(fix, sizeof fix, "if this copy brings a later tile, it went into bytes that are being read now: a refill may only "
                 "target a stage that no thread reads before the wait that retires it (%s, and every stage index uses the same "
                 "STAGES); or this %s's address strays out of the tile it means (a row stride, stage offset or swizzle "
                 "that leaves its buffer). If the %s really needs this copy, wait for it first", kRefillRule, what, what);
    else if (own && story == kLenient && before_its_wait)
        snprintf(fix, sizeof fix, "this thread has committed %llu group(s) since that wait, and the same wait issued now would "
                 "retire this copy: the %s comes before the wait meant to cover it. Move it below that wait and the "
                 "__syncthreads() after it (a stage is readable only once both have run)",
                 (unsigned long long)(a->committed - committed_at_wait), what);
    else if (own && story == kLenient && committed_at_wait <= uint64_t(a->wait_keep))
        snprintf(fix, sizeof fix, "that wait retired nothing: no more groups had been committed than it may leave pending. A "
                 "pipeline that waits with cp_async_wait<STAGES - 2> needs exactly STAGES - 1 groups committed before its "
                 "loop and one per iteration (commit an empty group when there is nothing left to copy), so that group j "
                 "holds tile j; if no copy is meant to stay in flight here, wait with cp_async_wait<0>(). A "
                 "__syncthreads() after the wait lets the other threads read the tile too");
    else if (own && story == kLenient)
        snprintf(fix, sizeof fix, "at that point the wait may leave at most %llu group(s) pending and still cover this copy "
                 "(cp_async_wait<%llu>), and a __syncthreads() after it lets the other threads read it too. A pipeline "
                 "waits with cp_async_wait<STAGES - 2> after committing exactly STAGES - 1 groups before its loop and one "
                 "per iteration (an empty group when there is nothing left to copy), so that group j holds tile j; "
                 "cp_async_wait<0>() is correct too, but it also waits for the tiles meant to stay in flight. If the wait "
                 "is already cp_async_wait<STAGES - 2>, the %s's stage index is wrong instead: it reads a stage whose "
                 "later tile is still in flight (tile j is in stage j %% STAGES, every index with the same STAGES)",
                 (unsigned long long)(committed_at_wait - c->group - 1), (unsigned long long)(committed_at_wait - c->group - 1),
                 what);
    else if (own)
        snprintf(fix, sizeof fix, "move this %s below a wait that covers the copy (cp_async_wait<N> leaves only the newest N "
                 "committed groups in flight: in a pipeline, the loop's cp_async_wait<STAGES - 2>); threads other than "
                 "the issuer also need a __syncthreads() after that wait", what);
    else if (w->named_used)  // warps in roles: buffers change hands at named barriers
        snprintf(fix, sizeof fix, "with warps in roles, a buffer changes hands at named barriers: thread %s must wait for its "
                 "copy (cp_async_wait) before it arrives at the barrier that hands the buffer over (named_barrier_arrive), and "
                 "this thread must wait at that barrier (named_barrier_sync) before this %s; if the %s is meant for the "
                 "buffer's previous contents, the copying thread must wait at the barrier the readers arrive at when they "
                 "leave the buffer before its cp.async overwrites it; or this %s's address strays out of its tile into a "
                 "buffer being refilled", who.c_str(), what, what, what);
    else if (story == kAfterWait)
        snprintf(fix, sizeof fix, "if that copy brings a later tile, it went into the stage being read now: a refill may only "
                 "target a stage that every thread has finished reading (%s, and every stage index uses the same STAGES); "
                 "if this %s is meant for the tile being computed, its address strays out of that tile into "
                 "a buffer being refilled (a row stride, stage offset or swizzle that leaves its buffer: check the %s's "
                 "row and column against the tile's bounds); if it is meant for the buffer's previous contents, a "
                 "__syncthreads() is missing before the cp.async that overwrites them; if it needs this copy, thread %s "
                 "must wait for it and a __syncthreads() must follow", kRefillRule, what, what, who.c_str());
    else
        snprintf(fix, sizeof fix, "bytes another thread copied are readable only after that thread's wait covers the copy "
                 "and a __syncthreads() follows it: if the wait is there, the __syncthreads() after it is missing (or this "
                 "%s comes before it); if this %s is meant for the buffer's previous contents, a __syncthreads() is "
                 "missing before the cp.async that overwrites them", what, what);
    claim_report();
    fill_location(g_err);
    capture_callers(g_err);
    g_err->copy_pc = c->ret - 1;  // inside the call that issued the copy
    g_err->kind = kUsage;
    g_err->line = -1;  // Python finds the line from the code address
    g_err->pc = ret - 1;  // inside the call to the trace hook, on the accessing line
    g_err->addr = addr;
    g_err->is_write = store;
    snprintf(g_err->text, sizeof g_err->text,
             "%s shared memory still in flight from the cp.async on line %d (issued by %s%s); %s — %s", store ? "write to" : "read of",
             c->line, own ? "this thread, " : "thread ", who.c_str(), why, fix);
    finish_report();
}

void async_access(Worker* w, uintptr_t a, unsigned size, bool store, uintptr_t ret) {
    const AsyncBlock& s = t_async;
    const size_t first = word_of(s, a);
    if (first == kNoWord) return;
    const size_t last = first + (a % 4 + size - 1) / 4;  // shared memory's parts start at 4-byte multiples
    for (size_t k = first; k <= last && k < s.owner.size(); ++k)
        if (s.owner[k]) report_in_flight(w, k, a, store, ret);
}

}  // namespace launcher

extern "C" {

using namespace launcher;

void emu_cp_async(void* dst, const void* src, unsigned bytes, unsigned src_bytes, int line) {
    const uintptr_t ret = uintptr_t(__builtin_return_address(0));
    Worker* w = t_worker;
    Fiber* f = cur_fiber();
    const Launch& L = g_launch;
    if (bytes != 4 && bytes != 8 && bytes != 16)
        emu_usage_error(line, "cp.async copies 4, 8 or 16 bytes, not %u", bytes);
    if (src_bytes > bytes)
        emu_usage_error(line, "cp.async: the source size %d is not within 0..%u: a %u-byte copy reads at most %u bytes "
                        "(and zero-fills the rest)", int(src_bytes), bytes, bytes, bytes);
    if (!emu_in_shared(dst, bytes))
        emu_usage_error(line, "cp.async: destination %p is not in shared memory%s (cp.async copies global -> shared)",
                        dst, emu_in_global(dst, 1) ? ": it points into an array argument, global memory" : "");
    if (uintptr_t(dst) % bytes)
        emu_usage_error(line, "cp.async: destination %p is not a multiple of %u bytes; a %u-byte cp.async needs both "
                        "addresses aligned to %u bytes (declare the shared tile __align__(%u), index whole %u-byte units)",
                        dst, bytes, bytes, bytes, bytes, bytes);
    if (src_bytes) {
        const uintptr_t p = uintptr_t(src);
        int arr = -1;
        for (int i = 0; i < L.nargs && arr < 0; ++i)
            if (p - L.arg_lo[i] < L.arg_len[i]) arr = i;
        if (arr < 0)
            emu_usage_error(line, "cp.async: source %p is in no array argument of the launch%s; cp.async reads global "
                            "memory: pass a pointer into one of the kernel's arrays (or 0 source bytes for a zero fill)",
                            src, emu_in_shared(src, 1) ? " (it is in shared memory)" : "");
        const unsigned long long off = p - L.arg_lo[arr];
        // Arrays stand for cudaMalloc'd memory, aligned on a GPU: the offset is what counts.
        if (off % bytes)
            emu_usage_error(line, "cp.async: source %p, byte %llu of the array passed as parameter %d (counting from 0), "
                            "is not a multiple of %u bytes from the array's start; a %u-byte cp.async needs both "
                            "addresses aligned to %u bytes", src, off, arr, bytes, bytes, bytes);
        if (!emu_in_global(src, src_bytes))
            emu_usage_error(line, "cp.async: source %p reads %u bytes from byte %llu of the array passed as parameter %d "
                            "(counting from 0), which has %llu bytes: past its end. For a tail tile, copy only what is "
                            "left (cp_async_cg16_zfill with fewer source bytes, 0 for none)",
                            src, src_bytes, off, arr, (unsigned long long)L.arg_len[arr]);
    }
    AsyncBlock& s = t_async;
    if (s.owner.size() < s.words) s.owner.resize(s.words);
    const size_t k = word_of(s, uintptr_t(dst));
    for (size_t j = k; j < k + bytes / 4; ++j)
        if (s.owner[j])
            emu_usage_error(line, "cp.async: destination %p is still the destination of the cp.async on line %d (thread %s), "
                            "in flight: two copies in flight to the same bytes land in no defined order. If the second "
                            "refills a pipeline stage, its stage index is wrong: %s, never one whose copy is "
                            "still in flight. If the two are meant for different places, their destinations overlap: a row stride, stage offset or "
                            "swizzle maps two chunks to the same bytes (a padded row stride in a buffer sized for "
                            "unpadded rows, an XOR that moves a chunk out of its row); if the buffer is being reused, "
                            "wait for the first (cp_async_wait, then __syncthreads() if another thread issued it) "
                            "before the second copy", dst, copy_at(w, s.owner[j] - 1, j).line, thread_name(w, s.owner[j] - 1).c_str(),
                            kRefillRule);
    AsyncCopies* a = copies_of(f);
    AsyncCopy c{static_cast<unsigned char*>(dst), bytes, line, a->committed, a->waits, ret, {}};
    memcpy(c.data, src, src_bytes);
    a->pending.push_back(c);
    memset(dst, 0xff, bytes);
    std::fill_n(s.owner.begin() + ptrdiff_t(k), bytes / 4, uint16_t(f->linear + 1));
    w->async_inflight++;
    if (t_race) race_access(uintptr_t(dst), bytes, kAccWrite, ret);
}

void emu_cp_async_commit(int) { copies_of(cur_fiber())->committed++; }

void emu_cp_async_wait(int pending, int line) {
    const uintptr_t ret = uintptr_t(__builtin_return_address(0));
    if (pending < 0) emu_usage_error(line, "cp.async.wait_group %d: the number of groups left in flight must be >= 0", pending);
    AsyncCopies* a = copies_of(cur_fiber());
    a->waits++;
    a->wait_line = line;
    a->wait_keep = pending;
    a->committed_at_wait = a->committed;
    retire(t_worker, a, a->retired(), ret);
}

void emu_cp_async_wait_all(int line) {
    const uintptr_t ret = uintptr_t(__builtin_return_address(0));
    AsyncCopies* a = copies_of(cur_fiber());
    a->committed++;
    a->waits++;
    a->wait_line = line;
    a->wait_keep = 0;
    a->committed_at_wait = a->committed;
    retire(t_worker, a, a->retired(), ret);
}

}  // extern "C"
