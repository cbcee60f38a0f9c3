// Fused softmax + cross-entropy + its gradient, in one launch.
//
// One block per row writes dlogits = (softmax - onehot) / rows and its row's loss;
// the last block to finish (counted with an atomic) adds the row losses up in a
// fixed order, so the mean loss is deterministic and never leaves the device
// until the caller copies back that one float.
#include "block_reduce.cu"

extern "C" __global__ void softmax_ce_grad(const float* logits, const int* targets, float* dlogits,
                                           float* row_losses, unsigned int* rows_done, float* loss,
                                           int rows, int cols) {
    __shared__ float scratch[32];
    __shared__ bool is_last_block;
    const long long offset = (long long)blockIdx.x * cols;
    const float* x = logits + offset;
    float* dx = dlogits + offset;
    const int target = targets[blockIdx.x];
    const bool target_ok = target >= 0 && target < cols;

    float row_max = LOWEST_FLOAT;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) row_max = fmaxf(row_max, x[j]);
    row_max = block_max(row_max, scratch);
    float total = 0.0f;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) total += expf(x[j] - row_max);
    total = block_sum(total, scratch);

    for (int j = threadIdx.x; j < cols; j += blockDim.x) {
        const float p = expf(x[j] - row_max) / total;
        dx[j] = (j == target ? p - 1.0f : p) / (float)rows;
    }
    if (threadIdx.x == 0) {
        // An out-of-range target makes the loss NaN, which the model reports as a non-finite loss.
        row_losses[blockIdx.x] = target_ok ? logf(total) - (x[target] - row_max) : __int_as_float(0x7fc00000);
        __threadfence();  // the row loss is visible to every block before this block is counted
        is_last_block = atomicAdd(rows_done, 1u) == (unsigned int)(rows - 1);
    }
    __syncthreads();
    if (!is_last_block) return;
    const volatile float* finished = row_losses;  // volatile: read what other blocks wrote, not a cached line
    float sum = 0.0f;
    for (int r = threadIdx.x; r < rows; r += blockDim.x) sum += finished[r];
    sum = block_sum(sum, scratch);
    if (threadIdx.x == 0) *loss = sum / (float)rows;
}
