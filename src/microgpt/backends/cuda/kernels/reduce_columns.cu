// Column sums over rows: the bias gradient (sum_rows) and LayerNorm's dgamma/dbeta.
//
// Grid (ceil(cols / 32), chunks), block (32, 8): block (bx, by) sums rows
// [by * rows_per_chunk, ...) of 32 adjacent columns (coalesced reads) and writes
// row `by` of out (chunks, cols). With more than one chunk the caller sums those
// partial rows with a second column_sums launch. No atomics: the result does not
// depend on scheduling.

#define COLUMN_TILE 32
#define ROW_LANES 8

template <bool PRODUCT>
__device__ __forceinline__ void column_sums_tile(const float* a, const float* b, float* out, int rows, int cols,
                                                 int rows_per_chunk) {
    __shared__ float partial[ROW_LANES][COLUMN_TILE + 1];
    const int col = blockIdx.x * COLUMN_TILE + threadIdx.x;
    const int first = blockIdx.y * rows_per_chunk;
    const int end = min(first + rows_per_chunk, rows);
    float acc = 0.0f;
    if (col < cols) {
        for (int r = first + threadIdx.y; r < end; r += ROW_LANES) {
            const long long i = (long long)r * cols + col;
            acc += PRODUCT ? a[i] * b[i] : a[i];
        }
    }
    partial[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && col < cols) {
        float sum = 0.0f;
        for (int lane = 0; lane < ROW_LANES; ++lane) sum += partial[lane][threadIdx.x];
        out[(long long)blockIdx.y * cols + col] = sum;
    }
}

extern "C" __global__ void column_sums(const float* a, float* out, int rows, int cols, int rows_per_chunk) {
    column_sums_tile<false>(a, a, out, rows, cols, rows_per_chunk);
}

// Column sums of the element-wise product a * b (dgamma = sum over rows of grad * norm).
extern "C" __global__ void column_product_sums(const float* a, const float* b, float* out, int rows, int cols,
                                               int rows_per_chunk) {
    column_sums_tile<true>(a, b, out, rows, cols, rows_per_chunk);
}
