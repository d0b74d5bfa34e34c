// mbarrier on both backends: phases and parities, a two-stage producer/consumer ring, and a
// try_wait whose time limit passes. Every result is a sum of small integers: exact.

// 128 threads meet at one barrier (count 128) for PHASES phases: in phase p each thread writes its
// slot of buffer p % 2, arrives, waits for the phase's parity, and reads its neighbour's slot. The
// buffer is written again only two phases later, after every thread has arrived once more, so
// after its reads of this phase.
#define PHASES 5
extern "C" __global__ void phases(float* out) {
    __shared__ unsigned long long bar;
    __shared__ float slot[2][128];
    const int t = threadIdx.x;
    if (t == 0) {
        mbarrier_init(&bar, 128);
        fence_mbarrier_init();
    }
    __syncthreads();
    float sum = 0.0f;
    for (int p = 0; p < PHASES; ++p) {
        slot[p % 2][t] = float(t * (p + 1));
        mbarrier_arrive(&bar);
        while (!mbarrier_try_wait_parity(&bar, p % 2)) {
        }
        sum += slot[p % 2][(t + 1) % 128];
    }
    out[t] = sum;
}

// Warp 0 produces, warps 1-3 consume: TILES tiles of 96 floats through two stages. full[s]
// completes when the 32 producer threads have written stage s; empty[s] when the 96 consumers
// have read it. The j-th use of stage s (tile j, s = j % 2) waits with parity (j / 2) % 2.
#define TILES 7
extern "C" __global__ void ring(const float* x, float* out) {
    __shared__ unsigned long long full[2], empty[2];
    __shared__ float stage[2][96];
    const int t = threadIdx.x;
    if (t == 0) {
        for (int s = 0; s < 2; ++s) {
            mbarrier_init(&full[s], 32);
            mbarrier_init(&empty[s], 96);
        }
        fence_mbarrier_init();
    }
    __syncthreads();
    if (t < 32) {
        for (int j = 0; j < TILES; ++j) {
            const int s = j % 2;
            if (j >= 2)
                while (!mbarrier_try_wait_parity(&empty[s], (j / 2 - 1) % 2)) {
                }
            for (int i = t; i < 96; i += 32) stage[s][i] = x[j * 96 + i];
            mbarrier_arrive(&full[s]);
        }
    } else {
        const int c = t - 32;
        float acc = 0.0f;
        for (int j = 0; j < TILES; ++j) {
            const int s = j % 2;
            while (!mbarrier_try_wait_parity(&full[s], (j / 2) % 2)) {
            }
            acc += stage[s][c] * float(j + 1);
            mbarrier_arrive(&empty[s]);
        }
        out[c] = acc;
    }
}

// One thread: a try_wait on a phase nobody has completed returns false once its time limit passes;
// the thread then arrives itself, and the next try_wait succeeds.
extern "C" __global__ void time_limit(float* out) {
    __shared__ unsigned long long bar;
    mbarrier_init(&bar, 1);
    fence_mbarrier_init();
    if (!mbarrier_try_wait_parity(&bar, 0)) {
        out[0] = 1.0f;
        mbarrier_arrive(&bar);
    }
    while (!mbarrier_try_wait_parity(&bar, 0)) {
    }
    out[1] = 2.0f;
}
