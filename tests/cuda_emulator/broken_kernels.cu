// Kernels with a deliberate bug each, for tests/test_cuda_emulator_selftest.py: the emulator
// must catch every one. Each takes a switch that turns the bug off, so the same kernel also
// shows the emulator passing correct code.
#define FULL_WARP 0xffffffffu

// out[0] = sum of x[0 .. blockDim.x): lane 0 of each warp writes its warp's sum, thread 0 adds
// them up. Without the barrier, thread 0 reads the other warps' slots before they are written.
extern "C" __global__ void block_sum_barrier(const float* x, float* out, int use_barrier) {
    __shared__ float warp_sums[32];
    float v = x[threadIdx.x];
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(FULL_WARP, v, offset);
    if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = v;
    if (use_barrier) __syncthreads();
    if (threadIdx.x == 0) {
        float total = 0.0f;
        for (int w = 0; w < (int)(blockDim.x >> 5); ++w) total += warp_sums[w];
        out[0] = total;
    }
}

// A full-warp shuffle that only the first `active` lanes reach.
extern "C" __global__ void divergent_shuffle(const float* x, float* out, int active) {
    float v = x[threadIdx.x];
    if ((int)threadIdx.x < active) v = __shfl_xor_sync(FULL_WARP, v, 1);
    out[threadIdx.x] = v;
}

// A barrier that only the first `active` threads reach.
extern "C" __global__ void divergent_barrier(float* out, int active) {
    if ((int)threadIdx.x < active) __syncthreads();
    out[threadIdx.x] = 1.0f;
}

// Each thread reads the shared slot `shift` to its right: past the block's last thread that
// slot was never written. Only block 0 fills the tile when `block0_only` is set: shared memory
// is per block, so the other blocks read unwritten slots.
extern "C" __global__ void shifted_shared_read(const float* x, float* out, int shift, int block0_only) {
    __shared__ float tile[64];
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (!block0_only || blockIdx.x == 0) tile[threadIdx.x] = x[i];
    __syncthreads();
    out[i] = tile[threadIdx.x + shift];
}

// out[i] = 1 for i < n + extra: `extra` elements past the end.
extern "C" __global__ void write_past_the_end(float* out, int n, int extra) {
    for (int i = threadIdx.x; i < n + extra; i += blockDim.x) out[i] = 1.0f;
}

// total[0] += x[i] for every i with float atomics: the sum's rounding depends on the order the
// threads get there, so different schedules give different bits.
extern "C" __global__ void atomic_total(const float* x, float* total, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(total, x[i]);
}

// Synchronises `rounds` times, or forever when rounds < 0 (a loop bound that never ends).
extern "C" __global__ void endless_barriers(float* out, int rounds) {
    for (int i = 0; rounds < 0 || i < rounds; ++i) __syncthreads();
    out[threadIdx.x] = 1.0f;
}
