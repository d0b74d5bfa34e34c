// launcher.hpp: what the files of the emulator's worker process share (see main.cpp).
#pragma once
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <time.h>
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

namespace launcher {


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
    kUsage = 13,  // a primitive used in a way a GPU faults on or gets wrong: the text is the whole message
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
    uint64_t callers[8];  // return addresses up the stack (usage errors): Python names the student's calling lines
    uint64_t copy_pc;  // a read of bytes still in flight: the cp.async's code address, so Python names the lines that issued it
    char text[8192];
};
static_assert(sizeof(ErrorRecord) < kHeaderBytes);

struct PrintSegment {
    uint64_t used;
    uint64_t truncated;
    char data[];
};

enum State : int { kReady = 0, kRunning, kWaitBarrier, kWaitWarp, kDone, kWaitNamed, kWaitMbar, kWaitGroup };

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
    int bar_id;  // the named barrier this thread waits at (kWaitNamed), or its mbarrier's index (kWaitMbar)
    // emu_warp_exchange: this lane's operands and the collective's name (the op is kExchange)
    const void* xin;
    void* xout;
    const char* xwhat;
    emu_combine_fn xfn;
    const void* xctx;
    struct AsyncCopies* async;  // async.cpp: this thread's cp.async copies not yet retired
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
    bool reverse, count_io, race, profile;
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

// A named barrier of a block (bar.sync / bar.arrive with an id and a thread count): the phase in
// progress, counted in arriving threads.
struct NamedBarrier {
    int expected = 0;  // the phase's thread count, set by its first arrival
    int arrived = 0;
    int line = 0;  // the first arrival's line
    std::vector<int> members;  // linear ids arrived in this phase
    std::vector<char> waits;  // per member: bar.sync (waits) or bar.arrive (goes on)
    std::vector<uint32_t> known;  // race mode: per member, its vector clock row at its arrival
    bool waited = false;  // some thread of the block has waited at this barrier (bar.sync)
    std::vector<char> seen;  // per thread of the block: has arrived at this barrier
    int distinct = 0;  // threads that have arrived at it at least once
};
constexpr int kNamedBarriers = 16;  // ids 1..15 for named barriers; 0 is __syncthreads()'s

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
    NamedBarrier named[kNamedBarriers];
    bool named_used = false;  // the block has used a named barrier
    // Race mode, once a block uses a named barrier: happens-before by vector clocks. clock[t]: the
    // barrier arrivals thread t has made; vc[t * threads + u]: the arrivals of u that t has
    // synchronised with. An access records its thread's clock in Access::epoch; it is ordered
    // before thread c's later access if vc[c][thread] exceeds it. Without named barriers every
    // thread's clock is the block's epoch and the check stays the plain epoch compare.
    bool vc_mode = false;
    std::vector<uint32_t> clock, vc;
    std::vector<std::vector<uint32_t>> warp_hist;  // per warp: the mask of each completed collective
    struct Shadow* sshadow = nullptr;  // shared memory's shadow: static part, then dynamic part
    size_t sshadow_bytes = 0;
    uintptr_t tls_base = 0;  // tls_lo rounded down to 4 bytes
    size_t tls_words = 0, dyn_words = 0;
    // async.cpp: copies in flight in this block (the traced build checks accesses against them)
    int async_inflight = 0;
    // profile.cpp: the memory profiler's per-warp records (set while profiling)
    struct Profile* prof = nullptr;
};

extern int g_proto_fd;
extern int g_shm_fd;
extern unsigned char* g_shm;
extern ErrorRecord* g_err;
extern int g_nthreads;
extern size_t g_print_seg;
extern std::vector<Library> g_libs;
extern std::vector<Worker*> g_workers;
extern Launch g_launch;
extern std::atomic<int> g_reporting;

extern std::mutex g_mu;
extern std::condition_variable g_cv_start, g_cv_done;
extern uint64_t g_generation;
extern int g_finished;

extern thread_local Worker* t_worker;
extern thread_local Worker* t_io;  // set while counting IO
extern thread_local Worker* t_race;  // set while detecting races

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

extern Shadow* g_gshadow;  // global arrays: one per word of the launch's reservation
extern size_t g_gshadow_bytes;
extern uint32_t g_uid;
extern uint32_t g_uid_first;
extern std::vector<uint64_t> g_uid_block;  // block instance - g_uid_first -> linear block index
extern uintptr_t g_race_lib_base;

// report.cpp: the error record, faults, the time limit
bool claim_report();
void fill_location(ErrorRecord* r);
void capture_callers(ErrorRecord* r);  // the return addresses up the stack, for usage errors (never in a signal handler)
[[noreturn]] void finish_report();
[[noreturn]] void report(int kind, int line, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
void install_handlers();
[[noreturn]] void report_timeout(double cpu_limit, double wall_cap, double cpu, double wall);

// fibers.cpp: threads, blocks and barriers
inline Fiber* cur_fiber() { return static_cast<Fiber*>(emu_ctx.cur); }
void fiber_yield(Worker* w);
std::string thread_name(const Worker* w, int linear);
std::string thread_ranges(const Worker* w, const std::vector<int>& ids);
void* worker_main(void* arg);

// warp.cpp: warp collectives
const char* warp_op_name(int op);
const char* collective_name(const Fiber& f);  // what a lane waiting at a warp collective waits at

// memory.cpp: shared memory of a block
void poison_shared(Worker* w);
void bind_tls(Worker* w, int lib);
void bind_dynamic_shared(Worker* w, size_t bytes);

// trace.cpp: IO counting and race detection in the traced (clang) build
void* map_zeroed(size_t bytes);
void race_access(uintptr_t a, unsigned size, int kind, uintptr_t ret);  // race mode: check and record one access

// async.cpp: cp.async (see emu_abi.hpp)
void async_block_begin(Worker* w);  // before a block's threads start
void async_thread_done(Worker* w, Fiber* f);  // a thread returned: what it still has in flight lands
void async_access(Worker* w, uintptr_t a, unsigned size, bool store, uintptr_t ret);  // traced build

// hopper.cpp: mbarrier, wgmma, fence.proxy.async (see emu_abi.hpp)
void hopper_block_begin(Worker* w);  // before a block's threads start
void hopper_thread_done(Worker* w, Fiber* f);  // a thread returned: its TMA stores land
bool hopper_stalled(Worker* w);  // no thread can run: true if mbarrier waits timed out (they run again)
std::string hopper_waiting(const Fiber& f);  // where a thread in kWaitMbar or kWaitGroup waits
std::string hopper_deadlock_notes(Worker* w);  // what the barriers and warpgroups wait for
void hopper_access(Worker* w, uintptr_t a, unsigned size, bool store, uintptr_t ret);  // traced build

// profile.cpp: the memory profiler (traced build)
extern thread_local Worker* t_prof;  // set while profiling
void prof_access(Worker* w, uintptr_t a, unsigned size, bool store, uintptr_t ret);
void prof_begin(Worker* w);  // before the launch's first block; sets t_prof
void prof_flush_warp(Worker* w, int base, unsigned mask);  // these lanes of a warp meet again
void prof_flush_block(Worker* w);  // every lane of the block meets again
void prof_reply();  // the profile, after the RUN command's OK line

// main.cpp: the command loop
void reply(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace launcher
