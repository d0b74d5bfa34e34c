// profile.cpp: the memory profiler: global sectors and shared-memory wavefronts per warp request.
//
// A GPU issues a load or store once per warp: the addresses of the active lanes form one request,
// which the memory system splits into 32-byte sectors (global memory) or wavefronts (shared
// memory: 32 banks of 4 bytes, one distinct word per bank per wavefront). Here every lane is a
// fiber that runs ahead of the rest of its warp until it blocks, so each lane's accesses are kept
// in program order and regrouped where the lanes meet again (a __syncthreads(), a warp collective
// the lane takes part in, the end of the block): the k-th access that each lane made at one code
// address since then is one request. A lane that skipped it (divergence) adds nothing to it.
//
// Only the launch's arrays (global) and the block's shared memory count; the fibers' stacks are
// registers and local memory on a GPU. Atomics are not loads or stores here (nor in Nsight's
// op_ld/op_st counters). Profiled launches run on one OS thread (run_share), so no locks.
#include <unordered_map>

#include "launcher.hpp"

namespace launcher {

thread_local Worker* t_prof = nullptr;

namespace {

struct Rec {
    uint64_t addr;
    uint32_t site;  // return address of the trace hook, as an offset in the kernel library
    uint8_t size;
    uint8_t store;
    uint8_t shared;
};

// One lane's access while regrouping: `k` is first the lane's sequence number, then the number of
// earlier accesses the lane made at the same site (its dynamic instance).
struct Entry {
    uint64_t addr;
    uint32_t site, k;
    uint8_t lane, size, store, shared;
};

struct SiteStats {
    unsigned size = 0;
    uint64_t requests = 0;  // warp-level instructions
    uint64_t units = 0;  // global: sectors; shared: wavefronts
    uint64_t ideal = 0;  // the fewest units the same bytes could take
    uint64_t lanes = 0;  // lane accesses
};

}  // namespace

struct Profile {
    uintptr_t lib_base = 0;
    std::vector<std::vector<Rec>> lanes;  // per thread of the block, since its warp last met
    std::unordered_map<uint64_t, SiteStats> sites;  // key: site << 2 | shared << 1 | store
    std::vector<Entry> group;  // scratch for one flush
    std::vector<uint64_t> keys;  // scratch for one request
};

void prof_begin(Worker* w) {
    if (!w->prof) w->prof = new Profile();
    Profile& P = *w->prof;
    P.lib_base = g_libs[g_launch.lib].base;
    P.lanes.resize(size_t(w->threads));
    for (auto& l : P.lanes) l.clear();
    P.sites.clear();
    t_prof = w;
}

void prof_access(Worker* w, uintptr_t a, unsigned size, bool store, uintptr_t ret) {
    Fiber* f = cur_fiber();
    if (!f) return;
    const Launch& L = g_launch;
    bool shared;
    if (a - L.res_lo < L.res_len) shared = false;
    else if (a - uintptr_t(w->tls_lo) < w->tls_len || a - uintptr_t(emu_ctx.dyn_smem) < w->dyn_len) shared = true;
    else return;
    w->prof->lanes[size_t(f->linear)].push_back(
        Rec{a, uint32_t(ret - w->prof->lib_base), uint8_t(size), uint8_t(store), uint8_t(shared)});
}

namespace {

size_t distinct(std::vector<uint64_t>& v) {
    std::sort(v.begin(), v.end());
    return size_t(std::unique(v.begin(), v.end()) - v.begin());
}

// Sectors of one global request: the distinct 32-byte segments its lanes' bytes fall in. Ideal:
// the requested bytes (each counted once) packed into aligned sectors.
void global_request(Profile& P, const Entry* e, size_t n, SiteStats& s) {
    std::vector<uint64_t>& keys = P.keys;
    keys.clear();
    for (size_t i = 0; i < n; ++i)
        for (uint64_t sec = e[i].addr >> 5; sec <= (e[i].addr + e[i].size - 1) >> 5; ++sec) keys.push_back(sec);
    s.units += distinct(keys);
    keys.clear();
    for (size_t i = 0; i < n; ++i)
        for (unsigned b = 0; b < e[i].size; ++b) keys.push_back(e[i].addr + b);
    s.ideal += (distinct(keys) + 31) / 32;
}

// Wavefronts of one shared request. The hardware serves 4-byte (and narrower) accesses for the
// whole warp at once, 8-byte ones a half warp and 16-byte ones a quarter warp at a time; within
// such a phase each bank delivers one distinct 4-byte word per wavefront (lanes reading the same
// word share it). Ideal: the distinct words, 32 per wavefront.
void shared_request(Profile& P, const Entry* e, size_t n, SiteStats& s) {
    std::vector<uint64_t>& words = P.keys;
    const unsigned lanes_per_phase = e[0].size <= 4 ? 32 : e[0].size == 8 ? 16 : 8;
    for (size_t i = 0; i < n;) {
        const unsigned phase = e[i].lane / lanes_per_phase;
        words.clear();
        for (; i < n && e[i].lane / lanes_per_phase == phase; ++i)
            for (uint64_t wd = e[i].addr >> 2; wd <= (e[i].addr + e[i].size - 1) >> 2; ++wd) words.push_back(wd);
        const size_t d = distinct(words);
        unsigned per_bank[32] = {};
        unsigned most = 0;
        for (size_t j = 0; j < d; ++j) most = std::max(most, ++per_bank[words[j] % 32]);
        s.units += most;
    }
    // The ideal counts words over the whole request (phases may share words).
    words.clear();
    for (size_t i = 0; i < n; ++i)
        for (uint64_t wd = e[i].addr >> 2; wd <= (e[i].addr + e[i].size - 1) >> 2; ++wd) words.push_back(wd);
    s.ideal += std::max<size_t>(1, (distinct(words) + 31) / 32);
}

}  // namespace

void prof_flush_warp(Worker* w, int base, unsigned mask) {
    Profile& P = *w->prof;
    std::vector<Entry>& g = P.group;
    g.clear();
    for (int j = 0; j < 32 && base + j < w->threads; ++j) {
        if (!(mask >> j & 1)) continue;
        std::vector<Rec>& recs = P.lanes[size_t(base + j)];
        for (size_t i = 0; i < recs.size(); ++i)
            g.push_back(Entry{recs[i].addr, recs[i].site, uint32_t(i), uint8_t(j), recs[i].size, recs[i].store,
                              recs[i].shared});
        recs.clear();
    }
    if (g.empty()) return;
    // Number each lane's accesses per site, in program order...
    std::sort(g.begin(), g.end(), [](const Entry& a, const Entry& b) {
        return a.site != b.site ? a.site < b.site : a.lane != b.lane ? a.lane < b.lane : a.k < b.k;
    });
    for (size_t i = 0; i < g.size(); ++i)
        g[i].k = i > 0 && g[i - 1].site == g[i].site && g[i - 1].lane == g[i].lane ? g[i - 1].k + 1 : 0;
    // ...then each (site, instance) with its lanes in order is one request (per space: a generic
    // pointer may reach global memory in some lanes and shared memory in others).
    std::sort(g.begin(), g.end(), [](const Entry& a, const Entry& b) {
        if (a.site != b.site) return a.site < b.site;
        if (a.k != b.k) return a.k < b.k;
        if (a.shared != b.shared) return a.shared < b.shared;
        return a.lane < b.lane;
    });
    for (size_t i = 0; i < g.size();) {
        size_t j = i + 1;
        while (j < g.size() && g[j].site == g[i].site && g[j].k == g[i].k && g[j].shared == g[i].shared) ++j;
        SiteStats& s = P.sites[uint64_t(g[i].site) << 2 | unsigned(g[i].shared) << 1 | g[i].store];
        s.size = std::max<unsigned>(s.size, g[i].size);
        s.requests++;
        s.lanes += j - i;
        if (g[i].shared) shared_request(P, &g[i], j - i, s);
        else global_request(P, &g[i], j - i, s);
        i = j;
    }
}

void prof_flush_block(Worker* w) {
    for (int base = 0; base < w->threads; base += 32) prof_flush_warp(w, base, ~0u);
}

// After the OK line of a profiled RUN: "PROF n", then one line per access site:
// "site shared store size requests units ideal lanes" (site in hex, the rest decimal).
void prof_reply() {
    Worker* w = g_workers[0];
    std::string out = "PROF " + std::to_string(w->prof ? w->prof->sites.size() : 0) + "\n";
    if (w->prof)
        for (const auto& [key, s] : w->prof->sites) {
            char line[160];
            snprintf(line, sizeof line, "%llx %u %u %u %llu %llu %llu %llu\n", (unsigned long long)(key >> 2),
                     unsigned(key >> 1 & 1), unsigned(key & 1), s.size, (unsigned long long)s.requests,
                     (unsigned long long)s.units, (unsigned long long)s.ideal, (unsigned long long)s.lanes);
            out += line;
        }
    for (size_t off = 0; off < out.size();) {
        ssize_t k = write(g_proto_fd, out.data() + off, out.size() - off);
        if (k <= 0) _exit(1);
        off += size_t(k);
    }
}

}  // namespace launcher
