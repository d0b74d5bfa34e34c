// report.cpp: the error record Python reads (grader/emulator/_worker.py), fault signals, the time limit.
#include "launcher.hpp"

#include <execinfo.h>

namespace launcher {

// Only the first error is reported: another thread faulting meanwhile waits for the exit.
bool claim_report() {
    if (g_reporting.exchange(1) == 0) return true;
    for (;;) pause();
}

void fill_location(ErrorRecord* r) {
    memset(r->callers, 0, sizeof r->callers);
    r->copy_pc = 0;
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

[[noreturn]] void report_timeout(double cpu_limit, double wall_cap, double cpu, double wall) {
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
    // "cpu_limit wall_cap cpu wall": Python says which limit it reached and how long the kernel ran.
    snprintf(g_err->text, sizeof g_err->text, "%.17g %.17g %.3f %.3f", cpu_limit, wall_cap, cpu, wall);
    finish_report();
}

}  // namespace launcher

extern "C" {

using namespace launcher;

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

}  // extern "C"

void launcher::capture_callers(ErrorRecord* r) {
    void* frames[16];
    const int n = backtrace(frames, 16);  // not from a signal handler: only the usage-error paths call this
    int kept = 0;
    for (int i = 1; i < n && kept < 8; ++i) r->callers[kept++] = uint64_t(uintptr_t(frames[i]));
}

extern "C" void emu_usage_error(int line, const char* fmt, ...) {
    claim_report();
    fill_location(g_err);
    capture_callers(g_err);
    g_err->kind = kUsage;
    g_err->line = line;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_err->text, sizeof g_err->text, fmt, ap);
    va_end(ap);
    finish_report();
}
