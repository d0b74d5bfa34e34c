// fibers.cpp: each CUDA thread a fiber; blocks run on a pool of OS threads; __syncthreads().
#include "launcher.hpp"

namespace launcher {

void fiber_body(Worker* w, Fiber* f) {
    g_launch.entry(g_launch.argv);
    async_thread_done(w, f);
    hopper_thread_done(w, f);
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

std::string where_waiting(const Fiber& f) {
    char buf[128];
    if (f.state == kWaitBarrier) snprintf(buf, sizeof buf, "wait at __syncthreads() on line %d", f.line);
    else if (f.state == kWaitWarp) snprintf(buf, sizeof buf, "wait at %s(mask 0x%08x) on line %d", collective_name(f), f.mask, f.line);
    else if (f.state == kWaitNamed)
        snprintf(buf, sizeof buf, "wait at named barrier %d (%d of %d threads arrived) on line %d", f.bar_id,
                 t_worker->named[f.bar_id].arrived, t_worker->named[f.bar_id].expected, f.line);
    else if (f.state == kWaitMbar || f.state == kWaitGroup) return hopper_waiting(f);
    else if (f.state == kDone) snprintf(buf, sizeof buf, "have finished (returned)");
    else snprintf(buf, sizeof buf, "are runnable");
    return buf;
}

// Every fiber of the block is blocked: explain who waits where.
[[noreturn]] void deadlock(Worker* w) {
    std::vector<std::pair<std::string, std::vector<int>>> groups;
    int first_waiting = -1;
    bool any_done = false, any_bar = false, any_warp = false, any_named = false, any_hopper = false;
    for (int i = 0; i < w->threads; ++i) {
        const Fiber& f = w->fibers[i];
        if (f.state != kDone && first_waiting < 0) first_waiting = i;
        any_done |= f.state == kDone;
        any_bar |= f.state == kWaitBarrier;
        any_warp |= f.state == kWaitWarp;
        any_named |= f.state == kWaitNamed;
        any_hopper |= f.state == kWaitMbar || f.state == kWaitGroup;
        std::string key = where_waiting(f);
        auto it = std::find_if(groups.begin(), groups.end(), [&](auto& g) { return g.first == key; });
        if (it == groups.end()) groups.push_back({key, {i}});
        else it->second.push_back(i);
    }
    std::string text = "deadlock: no thread of the block can continue.\n";
    for (size_t g = 0; g < groups.size() && g < 8; ++g)
        text += "  threads " + thread_ranges(w, groups[g].second) + " " + groups[g].first + "\n";
    if (any_hopper)
        text += hopper_deadlock_notes(w);
    else if (any_bar && any_done)
        text += "Every thread of a block must reach each __syncthreads(): do not return early (or skip a "
                "__syncthreads() in an if) before a barrier that other threads wait at; guard the work, "
                "not the barrier.";
    else if (any_named) {
        for (int id = 1; id < kNamedBarriers; ++id) {
            const NamedBarrier& b = w->named[id];
            if (b.distinct > b.expected && b.expected > 0)
                text += std::to_string(b.distinct) + " different threads of the block have arrived at barrier " +
                        std::to_string(id) + ", more than its count " + std::to_string(b.expected) +
                        ": a phase completes with the first " + std::to_string(b.expected) +
                        " and the rest spill into the next; if all of them meet at it each time, the count is " +
                        std::to_string(b.distinct) + ".\n";
        }
        text += "A named barrier releases its waiters when as many threads as its count have arrived at it (bar.sync "
                "or bar.arrive) in this phase: count the producer and consumer threads that reach each one, and check "
                "that the side that waits is not also the side that must arrive first (a producer that waits for a "
                "buffer no consumer will release, consumers that wait for a tile no producer will copy).";
    } else if (any_warp)
        text += "Every lane named in a warp collective's mask must call it: a lane that returned early, "
                "waits elsewhere, or is outside the block never arrives.";
    else
        text += "Threads wait at different barriers; on a GPU this kernel would hang.";
    Fiber& f = w->fibers[first_waiting < 0 ? 0 : first_waiting];
    emu_ctx.cur = &f;
    report(kBarrier, f.line, "%s", text.c_str());
}


// ----------------------------------------------------------------------------- scheduler

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
        w->vc_mode = false;
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
    async_block_begin(w);
    hopper_block_begin(w);
    w->live = n;
    w->arrived = 0;
    for (NamedBarrier& b : w->named) b.arrived = 0, b.members.clear(), b.waits.clear(), b.known.clear(), b.waited = false,
                                       b.seen.clear(), b.distinct = 0;
    w->named_used = false;
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
        if (!ran && w->live > 0 && !hopper_stalled(w)) deadlock(w);
    }
    if (t_prof) prof_flush_block(w);
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
    if (L.race || L.profile) {
        // One OS thread runs every block, in order: the race check is deterministic, and the
        // profiler's records need no locks.
        if (w != g_workers[0]) {
            t_io = nullptr;
            return;
        }
    }
    if (L.profile) prof_begin(w);
    if (L.race) {
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
    t_prof = nullptr;
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

}  // namespace launcher

extern "C" {

using namespace launcher;

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
    if (t_prof) prof_flush_block(w);
    for (int i = 0; i < w->threads; ++i) {
        w->fibers[i].state = kReady;
        w->fibers[i].result = uint64_t(result);
    }
    w->arrived = 0;
    w->epoch++;
    if (w->vc_mode) {  // everyone synchronises with everyone: each learns every thread's clock
        for (int i = 0; i < w->threads; ++i) w->clock[i]++;
        for (int i = 0; i < w->threads; ++i)
            std::copy(w->clock.begin(), w->clock.end(), w->vc.begin() + ptrdiff_t(i) * w->threads);
    }
    // Yield rather than run ahead: after a barrier the threads start again in schedule order,
    // much as a block's warps leave a barrier together on a GPU.
    fiber_yield(w);
    return result;
}

// bar.sync id, count (arrive = 0) or bar.arrive id, count (arrive = 1).
void emu_named_barrier(int id, int count, int arrive, int line) {
    Worker* w = t_worker;
    Fiber* f = cur_fiber();
    const char* what = arrive ? "named_barrier_arrive" : "named_barrier_sync";
    if (id < 1 || id >= kNamedBarriers)
        emu_usage_error(line, "%s(%d, %d): the barrier id must be 1..%d (a block has %d barriers; 0 is the one "
                        "__syncthreads() uses)", what, id, count, kNamedBarriers - 1, kNamedBarriers);
    if (count <= 0 || count % 32 || count > w->threads)
        emu_usage_error(line, "%s(%d, %d): the thread count must be a positive multiple of 32 (a barrier counts "
                        "whole warps), at most the block's %d threads", what, id, count, w->threads);
    NamedBarrier& b = w->named[id];
    w->named_used = true;
    if (b.arrived == 0) b.expected = count, b.line = line;
    else if (b.expected != count)
        emu_usage_error(line, "%s(%d, %d): thread %s arrives with count %d, but this phase of barrier %d began with "
                        "count %d (line %d): every thread of one phase must give the same count", what, id, count,
                        thread_name(w, int(f->linear)).c_str(), count, id, b.expected, b.line);
    if (b.seen.size() != size_t(w->threads)) b.seen.assign(size_t(w->threads), 0);
    if (!b.seen[f->linear]) b.seen[f->linear] = 1, b.distinct++;
    for (size_t k = 0; k < b.members.size(); ++k)
        if (b.members[k] == int(f->linear)) {
            if (b.distinct > b.expected)
                emu_usage_error(line, "%s(%d, %d): thread %s arrives at barrier %d a second time in one phase (the phase "
                                "began on line %d and still waits for %d more threads), and %d different threads of the "
                                "block have arrived at barrier %d, more than its count %d: a phase completes with the "
                                "first %d threads, and the rest spill into the next. If all of them meet at it each time, "
                                "the count is %d (producer and consumers)", what, id, count,
                                thread_name(w, int(f->linear)).c_str(), id, b.line, b.expected - b.arrived, b.distinct,
                                id, b.expected, b.expected, b.distinct);
            if (!b.waited)
                emu_usage_error(line, "%s(%d, %d): thread %s arrives at barrier %d a second time in one phase (the phase "
                                "began on line %d and still waits for %d more threads), and no thread of the block has "
                                "waited at barrier %d yet: the threads this barrier hands over to never wait at it (each "
                                "must call named_barrier_sync(%d, %d) before it uses what was handed over)",
                                what, id, count, thread_name(w, int(f->linear)).c_str(), id, b.line,
                                b.expected - b.arrived, id, id, count);
            emu_usage_error(line, "%s(%d, %d): thread %s arrives at barrier %d a second time in one phase (the phase began "
                            "on line %d and still waits for %d more threads): it runs ahead of the threads that wait at "
                            "this barrier. Before it arrives again it must wait at a barrier they arrive at once they are "
                            "done with what it handed over (a producer: at EMPTY before it refills a stage)",
                            what, id, count, thread_name(w, int(f->linear)).c_str(), id, b.line, b.expected - b.arrived);
        }
    if (!arrive) b.waited = true;
    if (t_race) {
        if (!w->vc_mode) {  // from now on, vector clocks (launcher.hpp): everyone starts at the epoch
            w->vc_mode = true;
            w->clock.assign(size_t(w->threads), w->epoch);
            w->vc.assign(size_t(w->threads) * w->threads, w->epoch);
        }
        w->clock[f->linear]++;
        // What this arrival passes on is what the thread knows now (an arriving thread goes on and
        // learns more later; that must not flow back into this phase).
        const uint32_t* row = &w->vc[size_t(f->linear) * w->threads];
        b.known.insert(b.known.end(), row, row + w->threads);
        b.known[b.known.size() - w->threads + f->linear] = w->clock[f->linear];
    }
    b.arrived++;
    b.members.push_back(int(f->linear));
    b.waits.push_back(char(!arrive));
    if (b.arrived < b.expected) {
        if (arrive) return;
        f->state = kWaitNamed;
        f->line = line;
        f->bar_id = id;
        fiber_yield(w);
        return;
    }
    // The phase is complete: the threads that wait learn what every arriving thread had done.
    if (t_race) {
        const int n = w->threads;
        std::vector<uint32_t> joined(size_t(n), 0);
        for (size_t k = 0; k < b.members.size(); ++k) {
            const uint32_t* row = &b.known[k * n];
            for (int u = 0; u < n; ++u) joined[u] = std::max(joined[u], row[u]);
        }
        for (size_t k = 0; k < b.members.size(); ++k)
            if (b.waits[k]) {
                uint32_t* mine = &w->vc[size_t(b.members[k]) * n];
                for (int u = 0; u < n; ++u) mine[u] = std::max(mine[u], joined[u]);
            }
    }
    for (int m : b.members)
        if (w->fibers[m].state == kWaitNamed && w->fibers[m].bar_id == id) w->fibers[m].state = kReady;
    b.arrived = 0;
    b.members.clear();
    b.waits.clear();
    b.known.clear();
    if (!arrive) {  // as after __syncthreads(): the released threads go on in schedule order
        f->state = kReady;
        fiber_yield(w);
    }
}

}  // extern "C"
