// TMA on both backends: one box per block loaded into shared memory on an mbarrier (its image,
// swizzle and zero-filled tails included, copied out as bytes), and stored back with a bulk group.

// The tile, from the first multiple of 1024 bytes of dynamic shared memory (a swizzled box's
// pattern starts there).
extern __shared__ unsigned char smem[];
__device__ unsigned char* tile_base() {
    return smem + (1024 - __cvta_generic_to_shared(smem) % 1024) % 1024;
}

__device__ void load(unsigned char* tile, const CUtensorMap* map, int rank, const int* c, unsigned bytes,
                     unsigned long long* bar) {
    if (threadIdx.x == 0) {
        fence_proxy_tensormap_acquire(map);
        mbarrier_init(bar, 1);
        fence_mbarrier_init();
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        mbarrier_arrive_expect_tx(bar, bytes);
        if (rank == 1) tma_load_1d(tile, map, c[0], bar);
        if (rank == 2) tma_load_2d(tile, map, c[0], c[1], bar);
        if (rank == 3) tma_load_3d(tile, map, c[0], c[1], c[2], bar);
        if (rank == 4) tma_load_4d(tile, map, c[0], c[1], c[2], c[3], bar);
        if (rank == 5) tma_load_5d(tile, map, c[0], c[1], c[2], c[3], c[4], bar);
    }
    while (!mbarrier_try_wait_parity(bar, 0)) {
    }
}

// The box of `map` at (c0, ..., c4) (the first `rank` of them), its bytes in shared memory copied to seen.
extern "C" __global__ void load_box(const CUtensorMap* map, unsigned char* seen, int rank, int c0, int c1, int c2,
                                    int c3, int c4, int bytes) {
    __shared__ unsigned long long bar;
    unsigned char* tile = tile_base();
    const int c[5] = {c0, c1, c2, c3, c4};
    load(tile, map, rank, c, bytes, &bar);
    for (int i = threadIdx.x; i < bytes; i += blockDim.x) seen[i] = tile[i];
}

// Block (x, y) moves the box at (x * box_x, y * box_y) from `in` to `out` through shared memory,
// and copies its shared image to seen[block].
extern "C" __global__ void copy_tiles(const CUtensorMap* in, const CUtensorMap* out, unsigned char* seen, int box_x,
                                      int box_y, int bytes) {
    __shared__ unsigned long long bar;
    unsigned char* tile = tile_base();
    const int c[2] = {int(blockIdx.x) * box_x, int(blockIdx.y) * box_y};
    load(tile, in, 2, c, bytes, &bar);
    const int block = blockIdx.y * gridDim.x + blockIdx.x;
    for (int i = threadIdx.x; i < bytes; i += blockDim.x) seen[block * bytes + i] = tile[i];
    if (threadIdx.x == 0) {
        fence_proxy_tensormap_acquire(out);
        tma_store_2d(out, c[0], c[1], tile);
        cp_async_bulk_commit_group();
        cp_async_bulk_wait_group<0>();
    }
}
