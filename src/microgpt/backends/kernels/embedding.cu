// Token embedding gather (forward) and scatter-add (backward) on the device.
//
// ids are int32. An id outside the table gives a NaN row in the gather (so the loss
// turns non-finite and says so) and is skipped by the scatter-add.

extern "C" __global__ void embedding_gather(const float* table, const int* ids, float* out, int n_ids, int d_model,
                                            int table_rows, int table_cols) {
    const long long n = (long long)n_ids * d_model;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        const int id = ids[i / d_model];
        const int col = (int)(i % d_model);
        out[i] = (id >= 0 && id < table_rows) ? table[(long long)id * table_cols + col] : __int_as_float(0x7fc00000);
    }
}

// d_table[ids[p], j] += grad[p, j]; atomics, so repeated ids accumulate.
extern "C" __global__ void embedding_scatter_add(const float* grad, const int* ids, float* d_table, int n_ids,
                                                 int d_model, int grad_cols, int table_rows, int table_cols) {
    const long long n = (long long)n_ids * d_model;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        const long long p = i / d_model;
        const int id = ids[p];
        const int col = (int)(i % d_model);
        if (id >= 0 && id < table_rows) atomicAdd(&d_table[(long long)id * table_cols + col], grad[p * grad_cols + col]);
    }
}
