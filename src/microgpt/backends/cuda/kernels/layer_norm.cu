// LayerNorm forward and the input gradient of its backward: one block per row,
// two-pass mean and (biased) variance, eps LN_EPS (prepended by loader.kernel_source). The gamma/beta gradients are
// column sums, done by reduce_columns.cu.
#include "block_reduce.cu"

extern "C" __global__ void layer_norm_forward(const float* x, const float* gamma, const float* beta, float* out,
                                              float* norm, float* std_inv, int rows, int cols) {
    __shared__ float scratch[32];
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
        norm[offset + j] = n;
        out[offset + j] = n * gamma[j] + beta[j];
    }
    if (threadIdx.x == 0) std_inv[blockIdx.x] = inv;
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
