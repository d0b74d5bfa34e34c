// emu_abi.hpp: the contract between a compiled kernel library and the emulator's launcher.
// Both sides include this file; keep it free of anything but plain types and declarations.
#pragma once
#include <cstdint>

struct uint3 {
    unsigned int x, y, z;
};

struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
    constexpr operator uint3() const { return uint3{x, y, z}; }
};

namespace emu {

// The part of a fiber (one CUDA thread) that kernel code reads directly.
struct FiberHead {
    uint3 tid;
    unsigned int linear;  // x + y*bx + z*bx*by: lane = linear % 32
};

// Per OS thread: the block being run and the fiber currently on the CPU.
struct ThreadCtx {
    FiberHead* cur;
    uint3 block_idx;
    dim3 block_dim;
    dim3 grid_dim;
    unsigned char* dyn_smem;
};

enum WarpOp : int {
    kShflIdx = 0,
    kShflUp,
    kShflDown,
    kShflXor,
    kBallot,
    kAny,
    kAll,
    kSyncWarp,
    kReduceAdd,
    kReduceMin,
    kReduceMax,
    kReduceAnd,
    kReduceOr,
    kReduceXor,
    kMatchAny,
    kExchange,  // emu_warp_exchange: mma, ldmatrix, WMMA (the name comes with the call)
    kWarpOpCount
};

enum BarrierReduce : int { kBarNone = 0, kBarCount, kBarAnd, kBarOr };

}  // namespace emu

// Defined by the launcher (exported with -rdynamic); kernel libraries resolve them at dlopen.
// initial-exec: the variable lives in the executable's static TLS, so one %fs-relative load.
// constinit: no dynamic initialisation, so no per-access TLS wrapper call either.
extern constinit thread_local emu::ThreadCtx emu_ctx __attribute__((tls_model("initial-exec")));

extern "C" {
void emu_syncthreads(int line);
int emu_syncthreads_reduce(int line, int op, int pred);
uint64_t emu_warp(int op, int line, unsigned mask, uint64_t bits, int arg, int width);
unsigned emu_activemask(void);
void emu_yield(void);
// bar.sync id, count (arrive = 0: wait until `count` threads have arrived in this phase) or
// bar.arrive id, count (arrive = 1: count this thread and go on). ids 1..15.
void emu_named_barrier(int id, int count, int arrive, int line);
[[noreturn]] void emu_assert_fail(const char* expr, const char* file, int line);
[[noreturn]] void emu_trap(const char* file, int line);
int emu_printf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
// IO accounting for atomics, which the compiler's load/store tracing does not see.
void emu_io_rmw(const void* addr, unsigned size);

// A warp collective that moves more than one value per lane (mma.sync, ldmatrix, WMMA). Every
// lane named in `mask` calls it with pointers to its own input and output (on its fiber's stack,
// which stays put while it waits). When the last lane arrives, `combine` runs once, given the 32
// lanes' pointers (null for lanes outside the mask), then all lanes continue together. A lane
// that never arrives is a deadlock naming `what` and the lines; lanes that meet at collectives of
// different `what` are an error too.
typedef void (*emu_combine_fn)(const void* const* in, void* const* out, unsigned mask, const void* ctx);
void emu_warp_exchange(int line, const char* what, unsigned mask, const void* in, void* out, emu_combine_fn combine,
                       const void* ctx);

// Where memory lies: 1 if all of [p, p+n) is in this block's shared memory (static __shared__ or
// the launch's dynamic shared memory), or in one array argument of the launch; else 0.
int emu_in_shared(const void* p, unsigned long n);
int emu_in_global(const void* p, unsigned long n);

// A misuse of a primitive that a GPU would fault on or silently get wrong (misaligned address,
// ldmatrix row outside shared memory, ...): reported with the calling thread, block and `line`,
// the message as given. Never returns.
[[noreturn]] void emu_usage_error(int line, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// cp.async: the copy is deferred. At issue the source is read (bounds-checked) and the
// destination (shared memory) is marked in flight: poisoned (0xFF bytes) in the normal build, and
// in the traced build any access to it before it retires is reported. emu_cp_async_commit closes
// the thread's current group; emu_cp_async_wait(n) retires every committed group but the newest
// n, writing their data; emu_cp_async_wait_all() commits, then waits for all. `src_bytes` below
// `bytes` zero-fills the rest (the "ignore-src" / src-size form); 0 reads nothing.
void emu_cp_async(void* dst, const void* src, unsigned bytes, unsigned src_bytes, int line);
void emu_cp_async_commit(int line);
void emu_cp_async_wait(int pending, int line);
void emu_cp_async_wait_all(int line);

// Hopper (hopper.cpp). Shared-window addresses: what __cvta_generic_to_shared gives on a GPU, a
// byte offset in the block's shared memory (static part first, the dynamic part after it at the
// next multiple of 1024), so that an address keeps its position in every swizzle pattern.
unsigned emu_smem_window(const void* p, int line);
void* emu_smem_pointer(unsigned window, unsigned bytes, int line);

// mbarrier: a phase counter, the arrivals still pending in the phase and its transaction bytes.
// kind 0: arrive; 1: arrive.expect_tx (tx bytes, then an arrival); 2: expect_tx alone. Returns the
// state token (the phase the arrival counted in). try_wait.parity: 1 once the phase of `parity`
// has completed; it may wait (the thread is suspended) and returns 0 when its time limit passes.
void emu_mbarrier_init(void* bar, unsigned count, int line);
uint64_t emu_mbarrier_arrive(void* bar, unsigned tx, int kind, int line);
int emu_mbarrier_try_wait_parity(void* bar, unsigned parity, int line);
void emu_fence_proxy_async(int line);
void emu_fence_mbarrier_init(int line);

// wgmma.mma_async m64nNk16 (f16 or bf16 in, f32 accumulators), issued by every thread of a
// warpgroup with its own operands; the launcher computes when the 128th arrives and keeps the
// accumulators in flight until the wgmma_wait_group that retires their group.
struct emu_wgmma_op {
    const char* what;  // the header function's name
    int n, bf16, trans_a, trans_b, rs;  // rs: A from registers (a), else through desc_a
    float* d;  // N / 2 accumulators of this thread
    const unsigned* a;  // rs: 4 registers of A's fragment
    uint64_t desc_a, desc_b;
    int scale_d;  // 0: D = A * B, else D = A * B + D
};
void emu_wgmma(const emu_wgmma_op* op, int line);
void emu_wgmma_fence(int line);
void emu_wgmma_commit(int line);
void emu_wgmma_wait(int pending, int line);
// setmaxnreg.inc (inc = 1) or .dec to `regs` registers: a warpgroup instruction.
void emu_setmaxnreg(int regs, int inc, int line);

// TMA (cp.async.bulk.tensor, tile mode) through a tensor map made by grader.TensorMap. A load reads
// its box at issue (zeros out of bounds), counts its bytes down the mbarrier at once and lands
// them in shared memory when the barrier's phase completes; until then they hold 0xFF bytes. A
// store reads shared memory at issue and writes global memory at the bulk wait_group that retires
// its group (or when the thread returns).
void emu_tma_load(void* dst, const void* map, const int* coords, int rank, void* bar, int line);
void emu_tma_store(const void* map, const int* coords, int rank, const void* src, int line);
void emu_bulk_commit(int line);
void emu_bulk_wait(int pending, int line);
}
