// Token embedding gather (forward) and scatter-add (backward) on the device.
//
// ids are int32. An id outside the table gives a NaN row in the gather (so the loss
// turns non-finite and says so) and is skipped by the scatter-add (no cell has its row).

extern "C" __global__ void embedding_gather(const float* table, const int* ids, float* out, int n_ids, int d_model,
                                            int table_rows, int table_cols) {
    const long long n = (long long)n_ids * d_model;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        const int id = ids[i / d_model];
        const int col = (int)(i % d_model);
        out[i] = (id >= 0 && id < table_rows) ? table[(long long)id * table_cols + col] : __int_as_float(0x7fc00000);
    }
}

// d_table[r, j] += sum of grad[p, j] over the positions p with ids[p] == r, added in the order of p.
// One thread per table cell, each reading every id: no atomics, so the result is the same bits on
// every run (the vocabulary is small, so n_ids * table cells stays cheap).
extern "C" __global__ void embedding_scatter_add(const float* grad, const int* ids, float* d_table, int n_ids,
                                                 int d_model, int grad_cols, int table_rows, int table_cols) {
    const long long n = (long long)table_rows * d_model;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        const int row = (int)(i / d_model), col = (int)(i % d_model);
        float sum = 0.0f;
        bool seen = false;
        for (int p = 0; p < n_ids; ++p) {
            if (ids[p] != row) continue;
            sum += grad[(long long)p * grad_cols + col];
            seen = true;
        }
        if (seen) d_table[(long long)row * table_cols + col] += sum;  // an unused row is left exactly as it was
    }
}
