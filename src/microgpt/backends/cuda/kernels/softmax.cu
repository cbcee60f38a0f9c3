// Row-wise softmax and its backward, plain and fused with the attention scale and
// causal mask, and the in-place causal masks. One block per row for the softmaxes;
// each thread strides over the columns, so any width works (no row tile in shared
// memory, which keeps T = 4096 attention rows fine).
#include "block_reduce.cu"

// out[row] = softmax(x[row] * scale). With `causal`, row r is position p = r % cols
// (rows are stacked (T, T) blocks): columns past p are masked and come out 0.
extern "C" __global__ void softmax_rows(const float* x, float* out, int rows, int cols, float scale, int causal) {
    __shared__ float scratch[32];
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
    for (int j = threadIdx.x; j < valid; j += blockDim.x) y[j] = y[j] / total;
    for (int j = valid + threadIdx.x; j < cols; j += blockDim.x) y[j] = 0.0f;
}

// out = scale * s * (ds - rowsum(ds * s)).
extern "C" __global__ void softmax_backward(const float* s, const float* ds, float* out, int rows, int cols, float scale) {
    __shared__ float scratch[32];
    const long long offset = (long long)blockIdx.x * cols;
    float dot = 0.0f;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) dot += ds[offset + j] * s[offset + j];
    dot = block_sum(dot, scratch);
    for (int j = threadIdx.x; j < cols; j += blockDim.x) {
        out[offset + j] = s[offset + j] * (ds[offset + j] - dot) * scale;
    }
}

// In place: scores[i, j] = MASKED_SCORE where j > i % period (period = rows for a single block).
extern "C" __global__ void causal_mask(float* scores, long long n, int cols, int period) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        const long long row = i / cols;
        if (i % cols > row % period) scores[i] = MASKED_SCORE;
    }
}
