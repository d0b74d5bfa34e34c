// emu_hopper.hpp: Hopper's primitives on the CPU emulator (course_hopper.cuh includes it under
// __CUDA_EMULATOR__; the GPU gets inline PTX instead). The launcher (src/hopper.cpp) models them:
// mbarrier phases and transaction bytes, the warpgroup's wgmma with its accumulators in flight.
#pragma once
#include "emu_abi.hpp"

namespace emu::hopper {

// The caller's line, as the last parameter (a class, so a stray extra argument is a compile error).
struct Line {
    int n;
};

#define EMU_HOPPER_FN inline __attribute__((always_inline))
// The launcher books what a wgmma reads at the return address of its call, so the call must return
// into the kernel (the student's line): no tail call.
#define EMU_HOPPER_KEEP_RETURN() asm volatile("")

template <int N, bool BF16, int TRANS_A, int TRANS_B, bool RS>
EMU_HOPPER_FN void wgmma(const char* what, float* d, const unsigned* a, unsigned long long desc_a,
                         unsigned long long desc_b, int scale_d, int line) {
    static_assert(N >= 8 && N <= 256 && N % 8 == 0, "wgmma m64nNk16: N is 8..256, a multiple of 8");
    static_assert((TRANS_A == 0 || TRANS_A == 1) && (TRANS_B == 0 || TRANS_B == 1),
                  "wgmma: TRANS_A and TRANS_B are 0 (K-major) or 1 (M- or N-major)");
    const emu_wgmma_op op{what, N, BF16, TRANS_A, TRANS_B, RS, d, a, desc_a, desc_b, scale_d};
    emu_wgmma(&op, line);
    EMU_HOPPER_KEEP_RETURN();
}

#undef EMU_HOPPER_KEEP_RETURN
#undef EMU_HOPPER_FN

}  // namespace emu::hopper
