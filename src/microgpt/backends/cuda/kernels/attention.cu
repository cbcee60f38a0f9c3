// Fused causal attention (flash attention) for n independent heads of T positions and width w:
// q, k, v, out and their gradients are (n, T, w) row-major; lse and delta are (n, T).
//
// Forward: out = softmax(q k^T * scale, causal) v without forming the T x T scores. Each warp owns
// one query row; a block's warps share tiles of KEY_TILE keys and values in shared memory. Lane j
// scores key j of the tile; the running max and sum (online softmax) rescale the accumulator,
// whose columns are spread over the lanes (column lane + 32c). It saves the row's log-sum-exp,
// lse = max + log(sum), so the backward can rebuild any probability as exp(s - lse).
//
// Backward (the FlashAttention-2 scheme, split in two kernels so nothing needs atomics):
//   delta_i = rowsum(dout_i * out_i)                     attention_row_dots
//   p_ij = exp(s_ij - lse_i), ds_ij = p_ij (dout_i . v_j - delta_i)
//   dq_i = scale * sum_j ds_ij k_j      one warp per query row, looping over key tiles  (flash_backward_dq)
//   dk_j = scale * sum_i ds_ij q_i,
//   dv_j = sum_i p_ij dout_i            one warp per key row, looping over query tiles  (flash_backward_dkv)
// Every sum runs in a fixed order, so the results are the same bits on every run.
//
// Launch: block (32, ROWS_PER_BLOCK), grid (n, ceil(T / ROWS_PER_BLOCK)); w <= MAX_WIDTH.
// Warps past the last row compute on row T - 1 (every thread must reach the barriers) and write nothing.
#include "block_reduce.cu"

#define MAX_WIDTH 128
#define ROWS_PER_BLOCK 8
#define KEY_TILE 32
#define LANE_COLUMNS (MAX_WIDTH / 32)  // accumulator columns per lane
#define PADDED (MAX_WIDTH + 1)         // a tile row's stride: lanes reading column d of 32 rows hit 32 banks

// Copy rows [first, first + count) of a (T, w) matrix into tile rows 0.. (rows past T are not copied).
__device__ __forceinline__ void load_rows(float* tile, int stride, const float* m, int first, int count, int T, int w) {
    const int thread = threadIdx.y * 32 + threadIdx.x, threads = 32 * ROWS_PER_BLOCK;
    for (int e = thread; e < count * w; e += threads) {
        const int r = e / w, d = e % w;
        if (first + r < T) tile[r * stride + d] = m[(long long)(first + r) * w + d];
    }
}

__device__ __forceinline__ float dot(const float* a, const float* b, int w) {
    float s = 0.0f;
    for (int d = 0; d < w; ++d) s += a[d] * b[d];
    return s;
}

extern "C" __global__ void flash_forward(const float* q, const float* k, const float* v, float* out, float* lse,
                                         int T, int w, float scale) {
    __shared__ float k_tile[KEY_TILE * PADDED];
    __shared__ float v_tile[KEY_TILE * MAX_WIDTH];
    __shared__ float q_rows[ROWS_PER_BLOCK * MAX_WIDTH];
    __shared__ float p_rows[ROWS_PER_BLOCK * KEY_TILE];
    const long long head = (long long)blockIdx.x * T * w;
    const int lane = threadIdx.x, warp = threadIdx.y;
    const int first_row = blockIdx.y * ROWS_PER_BLOCK, row = min(first_row + warp, T - 1);
    const int last_row = min(first_row + ROWS_PER_BLOCK, T) - 1;  // the block's causal horizon
    float* my_q = q_rows + warp * MAX_WIDTH;
    float* my_p = p_rows + warp * KEY_TILE;
    for (int d = lane; d < w; d += 32) my_q[d] = q[head + (long long)row * w + d];

    float row_max = LOWEST_FLOAT, total = 0.0f, acc[LANE_COLUMNS];
    for (int c = 0; c < LANE_COLUMNS; ++c) acc[c] = 0.0f;
    for (int t0 = 0; t0 <= last_row; t0 += KEY_TILE) {
        __syncthreads();  // the previous tile is no longer read
        load_rows(k_tile, PADDED, k + head, t0, KEY_TILE, T, w);
        load_rows(v_tile, MAX_WIDTH, v + head, t0, KEY_TILE, T, w);
        __syncthreads();
        const bool visible = t0 + lane <= row;
        const float s = visible ? dot(my_q, k_tile + lane * PADDED, w) * scale : LOWEST_FLOAT;
        const float new_max = fmaxf(row_max, warp_max(s));
        const float p = visible ? expf(s - new_max) : 0.0f;
        const float rescale = expf(row_max - new_max);
        total = total * rescale + warp_sum(p);
        row_max = new_max;
        my_p[lane] = p;
        __syncthreads();  // my_p is read by every lane of the warp
        const int keys = min(KEY_TILE, row - t0 + 1);
        for (int c = 0; c < LANE_COLUMNS; ++c) {
            const int d = lane + 32 * c;
            if (d >= w) break;
            float a = acc[c] * rescale;
            for (int j = 0; j < keys; ++j) a += my_p[j] * v_tile[j * MAX_WIDTH + d];
            acc[c] = a;
        }
    }
    if (first_row + warp >= T) return;
    for (int c = 0; c < LANE_COLUMNS && lane + 32 * c < w; ++c) out[head + (long long)row * w + lane + 32 * c] = acc[c] / total;
    if (lane == 0) lse[(long long)blockIdx.x * T + row] = row_max + logf(total);
}

// delta[r] = sum_d dout[r, d] * out[r, d] for the n * T rows; one warp per row.
extern "C" __global__ void attention_row_dots(const float* dout, const float* out, float* delta, long long rows, int w) {
    const long long row = (long long)blockIdx.x * ROWS_PER_BLOCK + threadIdx.y;
    float s = 0.0f;
    if (row < rows) {
        for (int d = threadIdx.x; d < w; d += 32) s += dout[row * w + d] * out[row * w + d];
    }
    s = warp_sum(s);
    if (row < rows && threadIdx.x == 0) delta[row] = s;
}

extern "C" __global__ void flash_backward_dq(const float* q, const float* k, const float* v, const float* dout,
                                             const float* lse, const float* delta, float* dq, int T, int w,
                                             float scale) {
    __shared__ float k_tile[KEY_TILE * PADDED];
    __shared__ float v_tile[KEY_TILE * PADDED];
    __shared__ float q_rows[ROWS_PER_BLOCK * MAX_WIDTH];
    __shared__ float do_rows[ROWS_PER_BLOCK * MAX_WIDTH];
    __shared__ float ds_rows[ROWS_PER_BLOCK * KEY_TILE];
    const long long head = (long long)blockIdx.x * T * w;
    const int lane = threadIdx.x, warp = threadIdx.y;
    const int first_row = blockIdx.y * ROWS_PER_BLOCK, row = min(first_row + warp, T - 1);
    const int last_row = min(first_row + ROWS_PER_BLOCK, T) - 1;
    float* my_q = q_rows + warp * MAX_WIDTH;
    float* my_do = do_rows + warp * MAX_WIDTH;
    float* my_ds = ds_rows + warp * KEY_TILE;
    for (int d = lane; d < w; d += 32) {
        my_q[d] = q[head + (long long)row * w + d];
        my_do[d] = dout[head + (long long)row * w + d];
    }
    const float row_lse = lse[(long long)blockIdx.x * T + row], row_delta = delta[(long long)blockIdx.x * T + row];

    float acc[LANE_COLUMNS];
    for (int c = 0; c < LANE_COLUMNS; ++c) acc[c] = 0.0f;
    for (int t0 = 0; t0 <= last_row; t0 += KEY_TILE) {
        __syncthreads();
        load_rows(k_tile, PADDED, k + head, t0, KEY_TILE, T, w);
        load_rows(v_tile, PADDED, v + head, t0, KEY_TILE, T, w);
        __syncthreads();
        float ds = 0.0f;
        if (t0 + lane <= row) {
            const float p = expf(dot(my_q, k_tile + lane * PADDED, w) * scale - row_lse);
            ds = p * (dot(my_do, v_tile + lane * PADDED, w) - row_delta);
        }
        my_ds[lane] = ds;
        __syncthreads();
        const int keys = min(KEY_TILE, row - t0 + 1);
        for (int c = 0; c < LANE_COLUMNS; ++c) {
            const int d = lane + 32 * c;
            if (d >= w) break;
            float a = acc[c];
            for (int j = 0; j < keys; ++j) a += my_ds[j] * k_tile[j * PADDED + d];
            acc[c] = a;
        }
    }
    if (first_row + warp >= T) return;
    for (int c = 0; c < LANE_COLUMNS && lane + 32 * c < w; ++c) dq[head + (long long)row * w + lane + 32 * c] = acc[c] * scale;
}

extern "C" __global__ void flash_backward_dkv(const float* q, const float* k, const float* v, const float* dout,
                                              const float* lse, const float* delta, float* dk, float* dv, int T,
                                              int w, float scale) {
    __shared__ float q_tile[KEY_TILE * PADDED];
    __shared__ float do_tile[KEY_TILE * PADDED];
    __shared__ float tile_lse[KEY_TILE], tile_delta[KEY_TILE];
    __shared__ float k_rows[ROWS_PER_BLOCK * MAX_WIDTH];
    __shared__ float v_rows[ROWS_PER_BLOCK * MAX_WIDTH];
    __shared__ float p_rows[ROWS_PER_BLOCK * KEY_TILE];
    __shared__ float ds_rows[ROWS_PER_BLOCK * KEY_TILE];
    const long long head = (long long)blockIdx.x * T * w;
    const int lane = threadIdx.x, warp = threadIdx.y;
    const int first_key = blockIdx.y * ROWS_PER_BLOCK, key = min(first_key + warp, T - 1);
    float* my_k = k_rows + warp * MAX_WIDTH;
    float* my_v = v_rows + warp * MAX_WIDTH;
    float* my_p = p_rows + warp * KEY_TILE;
    float* my_ds = ds_rows + warp * KEY_TILE;
    for (int d = lane; d < w; d += 32) {
        my_k[d] = k[head + (long long)key * w + d];
        my_v[d] = v[head + (long long)key * w + d];
    }

    float dk_acc[LANE_COLUMNS], dv_acc[LANE_COLUMNS];
    for (int c = 0; c < LANE_COLUMNS; ++c) dk_acc[c] = dv_acc[c] = 0.0f;
    for (int t0 = first_key; t0 < T; t0 += KEY_TILE) {  // queries before the block's first key see none of its keys
        __syncthreads();
        load_rows(q_tile, PADDED, q + head, t0, KEY_TILE, T, w);
        load_rows(do_tile, PADDED, dout + head, t0, KEY_TILE, T, w);
        if (warp == 0 && t0 + lane < T) {
            tile_lse[lane] = lse[(long long)blockIdx.x * T + t0 + lane];
            tile_delta[lane] = delta[(long long)blockIdx.x * T + t0 + lane];
        }
        __syncthreads();
        const int query = t0 + lane;
        float p = 0.0f, ds = 0.0f;
        if (query >= key && query < T) {
            p = expf(dot(q_tile + lane * PADDED, my_k, w) * scale - tile_lse[lane]);
            ds = p * (dot(do_tile + lane * PADDED, my_v, w) - tile_delta[lane]);
        }
        my_p[lane] = p;
        my_ds[lane] = ds;
        __syncthreads();
        const int first = max(key - t0, 0), end = min(KEY_TILE, T - t0);
        for (int c = 0; c < LANE_COLUMNS; ++c) {
            const int d = lane + 32 * c;
            if (d >= w) break;
            float a = dk_acc[c], b = dv_acc[c];
            for (int i = first; i < end; ++i) {
                a += my_ds[i] * q_tile[i * PADDED + d];
                b += my_p[i] * do_tile[i * PADDED + d];
            }
            dk_acc[c] = a;
            dv_acc[c] = b;
        }
    }
    if (first_key + warp >= T) return;
    for (int c = 0; c < LANE_COLUMNS && lane + 32 * c < w; ++c) {
        dk[head + (long long)key * w + lane + 32 * c] = dk_acc[c] * scale;
        dv[head + (long long)key * w + lane + 32 * c] = dv_acc[c];
    }
}
