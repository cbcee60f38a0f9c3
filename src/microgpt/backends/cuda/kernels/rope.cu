// Rotary position embedding, in place on a (rows, dim) head slice.
//
// Row r takes its angles from row r % cache_rows of the (cache_rows, cache_cols)
// cos/sin caches; pair i is columns (2i, 2i+1); an odd last column is left alone.
// sign = -1 gives the inverse rotation (the backward).

extern "C" __global__ void rope_rotate(float* x, const float* cos_cache, const float* sin_cache, int rows, int dim,
                                       int cache_rows, int cache_cols, float sign) {
    const int pairs = dim / 2;
    const long long n = (long long)rows * pairs;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        const long long row = i / pairs;
        const int col = 2 * (int)(i % pairs);
        const long long angle = (row % cache_rows) * cache_cols + col;
        const float c = cos_cache[angle], s = sign * sin_cache[angle];
        float* pair = x + row * dim + col;
        const float x0 = pair[0], x1 = pair[1];
        pair[0] = x0 * c - x1 * s;
        pair[1] = x0 * s + x1 * c;
    }
}
