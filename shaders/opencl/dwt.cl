/* kvsieve OpenCL kernels: one level of the periodized multi-level DWT (Mallat 1989) and its
 * inverse, per row. Signals of odd length L are extended to L' = L + 1 by repeating the last
 * sample. Filters: orthonormal Daubechies low-pass LO (Daubechies 1992, table 6.1), high-pass
 * hi[t] = (-1)^t lo[TAPS-1-t]. Accumulation in f32. */

#ifndef TAPS
#define TAPS 2
#endif
#ifndef DWT_LO
#define DWT_LO 0.70710678118654752f, 0.70710678118654752f /* Haar */
#endif

__constant float LO[TAPS] = {DWT_LO};

inline float hi_tap(int t) { return (t & 1) ? -LO[TAPS - 1 - t] : LO[TAPS - 1 - t]; }

/* a[i] = sum_t lo[t] c[(2i+t) mod L'], d[i] = sum_t hi[t] c[(2i+t) mod L'], i < L'/2.
 * src rows of length L (stride src_stride); a, d rows with their own strides. Grid (L'/2, rows). */
__kernel void dwt_level(__global const float *src, long src_off, long src_stride, int L,
                        __global float *a, long a_off, long a_stride, __global float *d, long d_off, long d_stride) {
    int i = get_global_id(0);
    long r = get_global_id(1);
    int Lp = L + (L & 1);
    if (i >= Lp / 2) return;
    __global const float *c = src + src_off + r * src_stride;
    float sa = 0.0f, sd = 0.0f;
    for (int t = 0; t < TAPS; t++) {
        int idx = 2 * i + t;
        while (idx >= Lp) idx -= Lp; /* no integer division: 2i + t < Lp + TAPS */
        if (idx >= L) idx = L - 1;
        float x = c[idx];
        sa += LO[t] * x;
        sd += hi_tap(t) * x;
    }
    a[a_off + r * a_stride + i] = sa;
    d[d_off + r * d_stride + i] = sd;
}

/* Inverse level (the transpose of dwt_level on the extended signal, which is orthogonal):
 * c[m] = sum over t, i with (2i + t) mod L' = m of lo[t] a[i] + hi[t] d[i], m < L (truncated).
 * For L' >= TAPS this is c[m] = sum_i a[i] lo[(m-2i) mod L'] + d[i] hi[(m-2i) mod L'].
 * Grid (L, rows). */
__kernel void idwt_level(__global const float *a, long a_off, long a_stride, __global const float *d, long d_off,
                         long d_stride, int n_half, __global float *dst, long dst_off, long dst_stride, int L) {
    int m = get_global_id(0);
    long r = get_global_id(1);
    if (m >= L) return;
    int Lp = 2 * n_half;
    __global const float *ar = a + a_off + r * a_stride;
    __global const float *dr = d + d_off + r * d_stride;
    float s = 0.0f;
    /* L' is even, so (m - t) mod L' is even exactly for the taps t of m's parity. */
    for (int t = m & 1; t < TAPS; t += 2) {
        int q = m - t;
        while (q < 0) q += Lp;
        int i = q >> 1;
        s += LO[t] * ar[i] + hi_tap(t) * dr[i];
    }
    dst[dst_off + r * dst_stride + m] = s;
}
