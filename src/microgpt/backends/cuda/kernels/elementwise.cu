// Element-wise kernels: bias add, ReLU (plain, backward, fused with the bias; each also as a `_bf16` kernel that
// writes its output's bfloat16 bits beside it, for the product that reads it), the bfloat16 rounding of any other
// product input, and the Adam and AdamW updates of the whole flat parameter buffer. Grid-stride loops over n
// elements, so any launch size covers any n.
#include "bf16.cu"

#define GRID_STRIDE_LOOP(i, n) \
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < (n); i += (long long)gridDim.x * blockDim.x)

// In place: data[i, j] += bias[j] for data (n / cols, cols).
extern "C" __global__ void bias_add(float* data, const float* bias, long long n, int cols) {
    GRID_STRIDE_LOOP(i, n) data[i] += bias[i % cols];
}

// out = x * mask, mask = (x > 0); written as a product so NaN and -0.0 come out as NumPy's do. Returns out[i].
__device__ __forceinline__ float relu_at(const float* x, float* out, float* mask, long long i) {
    const float m = x[i] > 0.0f ? 1.0f : 0.0f;
    mask[i] = m;
    return out[i] = x[i] * m;
}

extern "C" __global__ void relu_forward(const float* x, float* out, float* mask, long long n) {
    GRID_STRIDE_LOOP(i, n) relu_at(x, out, mask, i);
}

extern "C" __global__ void relu_forward_bf16(const float* x, float* out, float* mask, unsigned short* bits, long long n) {
    GRID_STRIDE_LOOP(i, n) bits[i] = bf16_of(relu_at(x, out, mask, i));
}

extern "C" __global__ void relu_backward(const float* grad, const float* mask, float* out, long long n) {
    GRID_STRIDE_LOOP(i, n) out[i] = grad[i] * mask[i];
}

extern "C" __global__ void relu_backward_bf16(const float* grad, const float* mask, float* out, unsigned short* bits,
                                              long long n) {
    GRID_STRIDE_LOOP(i, n) bits[i] = bf16_of(out[i] = grad[i] * mask[i]);
}

// x += bias (in place, as the reference does), then out, mask = relu_forward(x). Returns out[i].
__device__ __forceinline__ float bias_relu_at(float* x, const float* bias, float* out, float* mask, long long i, int cols) {
    x[i] += bias[i % cols];
    return relu_at(x, out, mask, i);
}

extern "C" __global__ void bias_relu(float* x, const float* bias, float* out, float* mask, long long n, int cols) {
    GRID_STRIDE_LOOP(i, n) bias_relu_at(x, bias, out, mask, i, cols);
}

extern "C" __global__ void bias_relu_bf16(float* x, const float* bias, float* out, float* mask, unsigned short* bits,
                                          long long n, int cols) {
    GRID_STRIDE_LOOP(i, n) bits[i] = bf16_of(bias_relu_at(x, bias, out, mask, i, cols));
}

// out[i] = the bfloat16 bits nearest x[i] (bf16.cu), for a product input no kernel of ours made.
extern "C" __global__ void round_bf16(const float* x, unsigned short* out, long long n) {
    GRID_STRIDE_LOOP(i, n) out[i] = bf16_of(x[i]);
}

// Adam with bias correction, in place on param, m and v. The host folds the step's
// corrections in: step_size = lr / (1 - beta1^t), v_correction = 1 - beta2^t.
extern "C" __global__ void adam_step(float* param, const float* grad, float* m, float* v, long long n,
                                     float beta1, float one_minus_beta1, float beta2, float one_minus_beta2,
                                     float eps, float step_size, float v_correction) {
    GRID_STRIDE_LOOP(i, n) {
        const float g = grad[i];
        const float m_new = beta1 * m[i] + one_minus_beta1 * g;
        const float v_new = beta2 * v[i] + one_minus_beta2 * (g * g);
        m[i] = m_new;
        v[i] = v_new;
        param[i] -= step_size * m_new / (sqrtf(v_new / v_correction) + eps);
    }
}

// AdamW in place on param, m and v (backends/adamw.py gives the formula): Adam with these betas on
// grad * grad_scale (below 1 when the global norm was clipped), after the decoupled decay
// param *= 1 - decay * decay_mask (decay = lr * weight_decay; the mask is 1 on decayed weights).
// An element whose train_mask is 0 is frozen: its param, m and v are not touched.
// grad is left as it was. The host folds in step_size = lr / (1 - beta1^t), v_correction = 1 - beta2^t.
extern "C" __global__ void adamw_step(float* param, const float* grad, float* m, float* v, const float* decay_mask,
                                      const float* train_mask, long long n, float grad_scale, float beta1,
                                      float one_minus_beta1, float beta2, float one_minus_beta2, float eps,
                                      float decay, float step_size, float v_correction) {
    GRID_STRIDE_LOOP(i, n) {
        if (train_mask[i] == 0.0f) continue;
        const float g = grad[i] * grad_scale;
        const float m_new = beta1 * m[i] + one_minus_beta1 * g;
        const float v_new = beta2 * v[i] + one_minus_beta2 * (g * g);
        m[i] = m_new;
        v[i] = v_new;
        const float decayed = param[i] * (1.0f - decay * decay_mask[i]);
        param[i] = decayed - step_size * m_new / (sqrtf(v_new / v_correction) + eps);
    }
}
