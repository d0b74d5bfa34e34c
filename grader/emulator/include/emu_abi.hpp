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
[[noreturn]] void emu_assert_fail(const char* expr, const char* file, int line);
[[noreturn]] void emu_trap(const char* file, int line);
int emu_printf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
// IO accounting for atomics, which the compiler's load/store tracing does not see.
void emu_io_rmw(const void* addr, unsigned size);
}
