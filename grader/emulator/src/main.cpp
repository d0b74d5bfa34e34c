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
//
// The files: main.cpp (commands, the arrays' layout), fibers.cpp (threads, blocks, barriers),
// warp.cpp (warp collectives), memory.cpp (shared memory, where an address lies, alignment),
// async.cpp (cp.async), trace.cpp (IO counting and race detection in the traced build),
// profile.cpp (the memory profiler), report.cpp (the error record, faults, the time limit).
#include "launcher.hpp"

__attribute__((visibility("default"))) constinit thread_local emu::ThreadCtx emu_ctx{};

namespace launcher {

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

// ----------------------------------------------------------------------------- commands

static double process_cpu_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

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

// RUN lib entry gx gy gz bx by bz shared flags cpu_limit_s wall_cap_s nargs (flags: 1 reverse, 2 count IO, 4 race check,
// 8 profile), then per argument
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
    L.profile = flags & 8;
    double limit = strtod(next(), nullptr);  // CPU seconds
    double wall_cap = strtod(next(), nullptr);  // wall-clock seconds
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

    // The limit counts this process's CPU time, the kernel's own work, so a busy machine does not
    // stop a correct kernel; a spinning fiber burns CPU, so an endless loop still reaches it at
    // once. The wall-clock cap, far above, catches a kernel blocked without using any CPU.
    const double cpu0 = process_cpu_seconds();
    const auto wall0 = std::chrono::steady_clock::now();
    {
        std::unique_lock<std::mutex> lk(g_mu);
        g_finished = 0;
        g_generation++;
        g_cv_start.notify_all();
        for (;;) {
            if (g_cv_done.wait_for(lk, std::chrono::milliseconds(20), [] { return g_finished == g_nthreads; })) break;
            double cpu = process_cpu_seconds() - cpu0;
            double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
            if (cpu >= limit || wall >= wall_cap) {
                lk.unlock();
                report_timeout(limit, wall_cap, cpu, wall);
            }
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
    reply("OK %.3f%s\n", process_cpu_seconds() - cpu0, io.c_str());
    if (L.profile) prof_reply();
}


}  // namespace launcher

using namespace launcher;

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

