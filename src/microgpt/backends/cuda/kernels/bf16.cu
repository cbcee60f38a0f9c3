// The bfloat16 bits nearest a float32, for the kernels that write a matrix product's input beside their float32
// output at --precision bf16: backends/bf16.py's bf16_bits, the specification. On the uint32 view, add 0x7FFF
// plus the last kept bit (ties to even) and keep the top half; a NaN is kept a NaN, made quiet, since the
// adding could carry its low bits into infinity.

__device__ __forceinline__ unsigned short bf16_of(float x) {
    const unsigned int u = __float_as_uint(x);
    return x != x ? (unsigned short)((u >> 16) | 0x0040u) : (unsigned short)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
