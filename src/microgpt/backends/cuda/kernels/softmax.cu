// Row-wise softmax and its backward, plain and fused with the attention scale and
// causal mask (each also as a `_bf16` kernel that writes its output's bfloat16 bits beside it,
// for the products that read it), and the in-place causal masks. One block per row for the softmaxes;
// each thread strides over the columns, so any width works (no row tile in shared
// memory, which keeps T = 4096 attention rows fine).
#include "bf16.cu"
#include "block_reduce.cu"

// out[row] = softmax(x[row] * scale). With `causal`, row r is position p = r % cols
// (rows are stacked (T, T) blocks): columns past p are masked and come out 0. With bits (not null),
// out's bfloat16 rounding is written beside it. scratch: the kernel's shared memory for the block reductions.
__device__ __forceinline__ void softmax_row(const float* x, float* out, unsigned short* bits, int cols, float scale,
                                            int causal, float* scratch) {
    const long long row = blockIdx.x;
    const float* in = x + row * cols;
    float* y = out + row * cols;
    const int valid = causal ? (int)(row % cols) + 1 : cols;

    float row_max = LOWEST_FLOAT;
    for (int j = threadIdx.x; j < valid; j += blockDim.x) row_max = fmaxf(row_max, in[j] * scale);
    row_max = block_max(row_max, scratch);

    float total = 0.0f;
    for (int j = threadIdx.x; j < valid; j += blockDim.x) {
        const float e = expf(in[j] * scale - row_max);
        y[j] = e;
        total += e;
    }
    total = block_sum(total, scratch);
    for (int j = threadIdx.x; j < valid; j += blockDim.x) {
        y[j] = y[j] / total;
        if (bits) bits[row * cols + j] = bf16_of(y[j]);
    }
    for (int j = valid + threadIdx.x; j < cols; j += blockDim.x) {
        y[j] = 0.0f;
        if (bits) bits[row * cols + j] = 0;
    }
}

extern "C" __global__ void softmax_rows(const float* x, float* out, int rows, int cols, float scale, int causal) {
    __shared__ float scratch[32];
    softmax_row(x, out, nullptr, cols, scale, causal, scratch);
}

extern "C" __global__ void softmax_rows_bf16(const float* x, float* out, unsigned short* bits, int rows, int cols,
                                             float scale, int causal) {
    __shared__ float scratch[32];
    softmax_row(x, out, bits, cols, scale, causal, scratch);
}

// out = scale * s * (ds - rowsum(ds * s)); with bits (not null), out's bfloat16 rounding beside it.
__device__ __forceinline__ void softmax_backward_row(const float* s, const float* ds, float* out, unsigned short* bits,
                                                     int cols, float scale, float* scratch) {
    const long long offset = (long long)blockIdx.x * cols;
    float dot = 0.0f;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) dot += ds[offset + j] * s[offset + j];
    dot = block_sum(dot, scratch);
    for (int j = threadIdx.x; j < cols; j += blockDim.x) {
        const float g = s[offset + j] * (ds[offset + j] - dot) * scale;
        out[offset + j] = g;
        if (bits) bits[offset + j] = bf16_of(g);
    }
}

extern "C" __global__ void softmax_backward(const float* s, const float* ds, float* out, int rows, int cols, float scale) {
    __shared__ float scratch[32];
    softmax_backward_row(s, ds, out, nullptr, cols, scale, scratch);
}

extern "C" __global__ void softmax_backward_bf16(const float* s, const float* ds, float* out, unsigned short* bits,
                                                 int rows, int cols, float scale) {
    __shared__ float scratch[32];
    softmax_backward_row(s, ds, out, bits, cols, scale, scratch);
}

// In place: scores[i, j] = MASKED_SCORE where j > i % period (period = rows for a single block).
extern "C" __global__ void causal_mask(float* scores, long long n, int cols, int period) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        const long long row = i / cols;
        if (i % cols > row % period) scores[i] = MASKED_SCORE;
    }
}
