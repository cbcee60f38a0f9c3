// LayerNorm forward (and `_bf16`, which writes the output's bfloat16 bits beside it for the products that read
// it) and the input gradient of its backward: one block per row, two-pass mean and (biased) variance, eps LN_EPS
// (prepended by loader.kernel_source). The gamma/beta gradients are column sums, done by reduce_columns.cu.
#include "bf16.cu"
#include "block_reduce.cu"

// One row (this block's) of the forward; with bits (not null), out's bfloat16 rounding written beside it too.
// scratch: the kernel's shared memory for block_sum.
__device__ __forceinline__ void layer_norm_row(const float* x, const float* gamma, const float* beta, float* out,
                                               float* norm, float* std_inv, unsigned short* bits, int cols,
                                               float* scratch) {
    const long long offset = (long long)blockIdx.x * cols;
    float sum = 0.0f;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) sum += x[offset + j];
    const float mean = block_sum(sum, scratch) / (float)cols;
    float squares = 0.0f;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) {
        const float c = x[offset + j] - mean;
        squares += c * c;
    }
    const float inv = 1.0f / sqrtf(block_sum(squares, scratch) / (float)cols + LN_EPS);
    for (int j = threadIdx.x; j < cols; j += blockDim.x) {
        const float n = (x[offset + j] - mean) * inv;
        const float y = n * gamma[j] + beta[j];
        norm[offset + j] = n;
        out[offset + j] = y;
        if (bits) bits[offset + j] = bf16_of(y);
    }
    if (threadIdx.x == 0) std_inv[blockIdx.x] = inv;
}

extern "C" __global__ void layer_norm_forward(const float* x, const float* gamma, const float* beta, float* out,
                                              float* norm, float* std_inv, int rows, int cols) {
    __shared__ float scratch[32];
    layer_norm_row(x, gamma, beta, out, norm, std_inv, nullptr, cols, scratch);
}

extern "C" __global__ void layer_norm_forward_bf16(const float* x, const float* gamma, const float* beta, float* out,
                                                   float* norm, float* std_inv, unsigned short* bits, int rows,
                                                   int cols) {
    __shared__ float scratch[32];
    layer_norm_row(x, gamma, beta, out, norm, std_inv, bits, cols, scratch);
}

// dx = std_inv * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)) with dnorm = grad * gamma.
extern "C" __global__ void layer_norm_backward(const float* grad, const float* norm, const float* std_inv,
                                               const float* gamma, float* dx, int rows, int cols) {
    __shared__ float scratch[32];
    const long long offset = (long long)blockIdx.x * cols;
    float dnorm_sum = 0.0f, dnorm_norm_sum = 0.0f;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) {
        const float dnorm = grad[offset + j] * gamma[j];
        dnorm_sum += dnorm;
        dnorm_norm_sum += dnorm * norm[offset + j];
    }
    const float dnorm_mean = block_sum(dnorm_sum, scratch) / (float)cols;
    const float dnorm_norm_mean = block_sum(dnorm_norm_sum, scratch) / (float)cols;
    const float inv = std_inv[blockIdx.x];
    for (int j = threadIdx.x; j < cols; j += blockDim.x) {
        const float dnorm = grad[offset + j] * gamma[j];
        dx[offset + j] = inv * (dnorm - dnorm_mean - norm[offset + j] * dnorm_norm_mean);
    }
}
