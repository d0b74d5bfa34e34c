// Hopper's tensor memory accelerator (TMA) and transaction barriers, as benchmarks/matmul_parts.py uses
// them (sm_90a, built with nvcc; the course header course_hopper.cuh has the same instructions for
// both backends, these kernels predate it). A tensor map (cuTensorMapEncodeTiled,
// made on the host) describes a 2-D array and the box one copy moves; one thread issues the copy
// of a whole box, and the bytes arriving count down an mbarrier's transaction count, so waiting on
// the barrier's phase is waiting for the data.
#pragma once

__device__ __forceinline__ unsigned smem_u32(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }

// The maps live in global memory (CuPy passes no 128-byte struct by value); their bytes were
// written by a host copy, so the tensor-map proxy must see them before the first copy uses them.
__device__ __forceinline__ void tensormap_acquire(const void* map) {
    asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;" ::"l"(map) : "memory");
}

__device__ __forceinline__ void barrier_init(unsigned long long* bar, unsigned arrivals) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(arrivals) : "memory");
}

__device__ __forceinline__ void barrier_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }

// One arrival that also announces `bytes` of copies to come in this phase.
__device__ __forceinline__ void barrier_expect(unsigned long long* bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
}

__device__ __forceinline__ void barrier_arrive(unsigned long long* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(bar)) : "memory");
}

// Until the phase of parity `parity` has completed (its arrivals made and its bytes landed).
__device__ __forceinline__ void barrier_wait(unsigned long long* bar, unsigned parity) {
    unsigned done = 0;
    while (!done)
        asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\tselp.u32 %0, 1, 0, p;\n\t}"
                     : "=r"(done) : "r"(smem_u32(bar)), "r"(parity) : "memory");
}

// The box of `map` whose first element is (column x, row y) into shared memory at dst.
__device__ __forceinline__ void tma_load_2d(void* dst, const void* map, int x, int y, unsigned long long* bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
                 ::"r"(smem_u32(dst)), "l"(map), "r"(x), "r"(y), "r"(smem_u32(bar)) : "memory");
}
