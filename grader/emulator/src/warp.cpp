// warp.cpp: warp collectives: shuffles, votes, reductions, __syncwarp, and the exchange mma.sync,
// ldmatrix and WMMA are built on.
#include "launcher.hpp"

namespace launcher {

const char* warp_op_name(int op) {
    static const char* names[] = {"__shfl_sync", "__shfl_up_sync", "__shfl_down_sync", "__shfl_xor_sync",
                                  "__ballot_sync", "__any_sync", "__all_sync", "__syncwarp",
                                  "__reduce_add_sync", "__reduce_min_sync", "__reduce_max_sync",
                                  "__reduce_and_sync", "__reduce_or_sync", "__reduce_xor_sync",
                                  "__match_any_sync"};
    op &= 0xff;
    return op < emu::kExchange ? names[op] : "warp collective";
}

const char* collective_name(const Fiber& f) { return (f.op & 0xff) == emu::kExchange ? f.xwhat : warp_op_name(f.op); }

}  // namespace launcher

extern "C" {

using namespace launcher;

// A lane arrives at a warp collective. True when it is the last lane of `mask` to arrive: it then
// completes the collective for all of them. False once the others have completed it, after this
// lane waited (its result is in place).
static bool warp_arrive(Worker* w, Fiber* f, int op, int line, unsigned mask) {
    const int lane = int(f->linear) & 31;
    const int base = int(f->linear) - lane;
    f->op = op;
    const char* name = collective_name(*f);
    if (!(mask >> lane & 1))
        report(kBarrier, line, "lane %d calls %s with mask 0x%08x, which does not include the lane itself; "
               "the mask must name every lane that calls it (often FULL_MASK / 0xffffffff)", lane, name, mask);
    for (int j = 0; j < 32; ++j) {
        if (!(mask >> j & 1)) continue;
        if (base + j >= w->threads)
            report(kBarrier, line, "%s: mask 0x%08x names lane %d, but this warp has only %d threads (the block has "
                   "%d threads, not a multiple of 32). Lanes that do not exist never arrive: use "
                   "__activemask() or a mask of the existing lanes.",
                   name, mask, j, w->threads - base, w->threads);
        const Fiber& o = w->fibers[base + j];
        if (o.state == kDone)
            report(kBarrier, line, "%s(mask 0x%08x) on line %d waits for lane %d (thread %s), which has already "
                   "finished: every lane in the mask must call the collective. Do not return early before a warp "
                   "collective; keep all lanes in the loop and guard only the loads and stores.",
                   name, mask, line, j, thread_name(w, base + j).c_str());
    }
    f->state = kWaitWarp;
    f->line = line;
    f->mask = mask;
    for (int j = 0; j < 32; ++j) {
        if (!(mask >> j & 1)) continue;
        const Fiber& o = w->fibers[base + j];
        if (o.state != kWaitWarp || o.mask != mask) {
            fiber_yield(w);
            return false;
        }
    }
    return true;
}

// The collective is complete: note it for the race detector and the profiler, then continue with
// the other lanes, like a barrier, in schedule order.
static void warp_release(Worker* w, int base, unsigned mask) {
    if (t_prof) prof_flush_warp(w, base, mask);
    if (t_race) {
        std::vector<uint32_t>& hist = w->warp_hist[size_t(base >> 5)];
        hist.push_back(mask);
        for (int j = 0; j < 32; ++j)
            if (mask >> j & 1) w->fibers[base + j].wlast = uint32_t(hist.size());
    }
    fiber_yield(w);
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
    f->val = bits;
    f->arg = arg;
    f->width = width;
    if (!warp_arrive(w, f, op, line, mask)) return f->result;
    // Every lane of the mask is here: compute each lane's result and wake them.
    const int kind = op & 0xff;
    const bool is_signed = op & 0x100;
    for (int j = 0; j < 32; ++j) {
        if (!(mask >> j & 1)) continue;
        const Fiber& o = w->fibers[base + j];
        if ((o.op & 0xff) != kind)
            report(kBarrier, line, "lanes of one warp meet at different collectives: lane %d at %s (line %d), lane %d at %s (line %d)",
                   lane, warp_op_name(op), line, j, collective_name(o), o.line);
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
    warp_release(w, base, mask);
    return f->result;
}

void emu_warp_exchange(int line, const char* what, unsigned mask, const void* in, void* out, emu_combine_fn combine,
                       const void* ctx) {
    Worker* w = t_worker;
    Fiber* f = cur_fiber();
    f->xin = in;
    f->xout = out;
    f->xwhat = what;
    f->xfn = combine;
    f->xctx = ctx;
    if (!warp_arrive(w, f, emu::kExchange, line, mask)) return;
    const int base = int(f->linear) & ~31;
    const void* ins[32] = {};
    void* outs[32] = {};
    for (int j = 0; j < 32; ++j) {
        if (!(mask >> j & 1)) continue;
        const Fiber& o = w->fibers[base + j];
        if ((o.op & 0xff) != emu::kExchange || o.xwhat != what || o.xfn != combine)
            report(kBarrier, line, "lanes of one warp meet at different collectives: lane %d at %s (line %d), lane %d "
                   "at %s (line %d)", int(f->linear) & 31, what, line, j, collective_name(o), o.line);
        ins[j] = o.xin;
        outs[j] = o.xout;
    }
    combine(ins, outs, mask, ctx);
    for (int j = 0; j < 32; ++j)
        if (mask >> j & 1) w->fibers[base + j].state = kReady;
    warp_release(w, base, mask);
}

}  // extern "C"
