/* kvsieve OpenCL kernels: element-wise ops, row reductions, conversions, embedding, RoPE, GEMV.
 * Compiled at run time behind a generated #define prelude; every knob below has a default so the
 * file also builds alone. OpenCL C 1.2; f16 is storage only (vload_half / vstore_half_rte), so no
 * cl_khr_fp16 is needed. All offsets are in elements of the buffer's type unless named *_byte. */

#ifndef WG
#define WG 256            /* work-group size of the row-reduction kernels (power of two) */
#endif
/* Storage type of the source / destination of `convert` and of the GEMV weight:
 * 0 = f32, 1 = f16, 2 = bf16 (block-type weights: qmatmul.cl). */
#ifndef SRC_T
#define SRC_T 0
#endif
#ifndef DST_T
#define DST_T 0
#endif

/* ---- storage helpers ---- */

inline float bf16_to_f32(ushort h) { return as_float(((uint)h) << 16); }

/* Round-to-nearest-even; NaN stays a quiet NaN (as kvs_f32_to_bf16 on the host). */
inline ushort f32_to_bf16(float f) {
    uint x = as_uint(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (ushort)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (ushort)(x >> 16);
}

/* f16 bits -> f32, exact (normals, subnormals, inf, NaN), without branches: the exponent is
 * rebiased by a multiply by 2^112, which also normalises subnormals. Used instead of vload_half
 * on the read paths because some CPU runtimes implement vload_half as a scalar library call. */
inline float f16_to_f32(ushort h) {
    uint em = (uint)(h & 0x7fffu);
    float f = as_float(em << 13) * 0x1.0p112f;
    f = em >= 0x7c00u ? as_float((em << 13) | 0x7f800000u) : f;
    return as_float(as_uint(f) | ((uint)(h & 0x8000u) << 16));
}

#if SRC_T == 0
#define SRC_PTR __global const float *
#define LOAD_SRC(p, i) ((p)[i])
#elif SRC_T == 1
#define SRC_PTR __global const ushort *
#define LOAD_SRC(p, i) f16_to_f32((p)[i])
#else
#define SRC_PTR __global const ushort *
#define LOAD_SRC(p, i) bf16_to_f32((p)[i])
#endif

#if DST_T == 0
#define DST_PTR __global float *
#define LOAD_DST(p, i) ((p)[i])
#define STORE_DST(p, i, v) ((p)[i] = (v))
#elif DST_T == 1
#define DST_PTR __global half *
#define LOAD_DST(p, i) vload_half((i), (p))
#define STORE_DST(p, i, v) vstore_half_rte((v), (i), (p))
#else
#define DST_PTR __global ushort *
#define LOAD_DST(p, i) bf16_to_f32((p)[i])
#define STORE_DST(p, i, v) ((p)[i] = f32_to_bf16(v))
#endif

/* ---- element-wise ---- */

/* y[i] = a[i] + b[i], i < n (f32). */
__kernel void add_f32(__global const float *a, long a_off, __global const float *b, long b_off,
                      __global float *y, long y_off, long n) {
    long i = get_global_id(0);
    if (i < n) y[y_off + i] = a[a_off + i] + b[b_off + i];
}

/* y[i] = l[i] == 0 ? -inf : m[i] + log(l[i]) (f32; kvs_log_mass). */
__kernel void log_mass_f32(__global const float *m, long m_off, __global const float *l, long l_off,
                           __global float *y, long y_off, long n) {
    long i = get_global_id(0);
    if (i < n) {
        float s = l[l_off + i];
        y[y_off + i] = s == 0.0f ? -INFINITY : m[m_off + i] + log(s);
    }
}

/* out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)) (f32). */
__kernel void swiglu_f32(__global const float *g, long g_off, __global const float *u, long u_off,
                         __global float *y, long y_off, long n) {
    long i = get_global_id(0);
    if (i < n) {
        float x = g[g_off + i];
        y[y_off + i] = x / (1.0f + exp(-x)) * u[u_off + i];
    }
}

/* dst[i] = convert(src[i]) for SRC_T -> DST_T (f32/f16/bf16), round-to-nearest-even. */
__kernel void convert(SRC_PTR src_base, long src_off, DST_PTR dst, long dst_off, long n) {
    long i = get_global_id(0);
    if (i >= n) return;
    float v = LOAD_SRC(src_base + src_off, i);
    STORE_DST(dst + dst_off, i, v);
}

/* Bit copy of n 16-bit words (f16 -> f16, bf16 -> bf16: payloads preserved). */
__kernel void copy_u16(__global const ushort *src, long src_off, __global ushort *dst, long dst_off, long n) {
    long i = get_global_id(0);
    if (i < n) dst[dst_off + i] = src[src_off + i];
}

/* ---- row reductions: one work-group of WG items per row ---- */

/* Deterministic tree sum over the work-group (fixed order for a fixed WG). */
inline float wg_sum(__local float *sh, float v) {
    int lid = get_local_id(0);
    sh[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = WG / 2; s > 0; s >>= 1) {
        if (lid < s) sh[lid] += sh[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float r = sh[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}

inline float wg_max(__local float *sh, float v) {
    int lid = get_local_id(0);
    sh[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = WG / 2; s > 0; s >>= 1) {
        if (lid < s) sh[lid] = fmax(sh[lid], sh[lid + s]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float r = sh[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}

/* x, y: [rows][dim] f32; w: [dim]. y = x / sqrt(mean(x^2) + eps) * w. y may alias x. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void rmsnorm_f32(__global const float *x, long x_off, __global const float *w, long w_off,
                 __global float *y, long y_off, int dim, float eps) {
    __local float sh[WG];
    long row = get_group_id(0);
    int lid = get_local_id(0);
    __global const float *xr = x + x_off + row * dim;
    float acc = 0.0f;
    for (int c = lid; c < dim; c += WG) acc += xr[c] * xr[c];
    float ss = wg_sum(sh, acc);
    float r = 1.0f / sqrt(ss / (float)dim + eps);
    __global float *yr = y + y_off + row * dim;
    for (int c = lid; c < dim; c += WG) yr[c] = xr[c] * r * w[w_off + c];
}

/* x, y: [rows][n] f32. y = softmax(scale * x) per row; -inf entries get 0; all -inf rows give 0. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void softmax_f32(__global const float *x, long x_off, __global float *y, long y_off, int n, float scale) {
    __local float sh[WG];
    long row = get_group_id(0);
    int lid = get_local_id(0);
    __global const float *xr = x + x_off + row * n;
    __global float *yr = y + y_off + row * n;
    float m = -FLT_MAX;
    for (int c = lid; c < n; c += WG) m = fmax(m, scale * xr[c]);
    m = wg_max(sh, m);
    float acc = 0.0f;
    for (int c = lid; c < n; c += WG) acc += exp(scale * xr[c] - m);
    float l = wg_sum(sh, acc);
    float inv = l != 0.0f ? 1.0f / l : 0.0f; /* NaN propagates */
    for (int c = lid; c < n; c += WG) yr[c] = exp(scale * xr[c] - m) * inv;
}

/* ---- embedding ---- */

/* out[i][c] = table[ids[i]][c] (f32), table of SRC_T. Ids outside [0, vocab) write a zero row. */
__kernel void embedding(SRC_PTR table, long t_off, __global const int *ids, __global float *out, long o_off,
                        int dim, int vocab) {
    int c = get_global_id(0);
    int i = get_global_id(1);
    if (c >= dim) return;
    int id = ids[i];
    float v = 0.0f;
    if (id >= 0 && id < vocab) v = LOAD_SRC(table + t_off, (long)id * dim + c);
    out[o_off + (long)i * dim + c] = v;
}

/* ---- RoPE ---- */

/* Rotates pair p < n_rot/2 of each vector r < n_vec of length head_dim, in place, storage DST_T
 * (f32 or f16). Angle = pos * freq_p, freq_p from an f64 table on the host passed as two f32
 * (freq[2p] + freq[2p+1]).
 * pos index: r / pos_div; rope_shift: vec_stride > 0, rows (r % vec_stride) >= n_rows skipped and
 * pos_div = 1. neox: pair (p, p + n_rot/2); else (2p, 2p+1). */
__kernel void rope(DST_PTR x, long x_off, __global const int *pos, long pos_off, __global const float *freq,
                   int head_dim, int n_rot, long n_vec, int pos_div, int vec_stride, int n_rows, int neox) {
    int p = get_global_id(0);
    long r = get_global_id(1);
    if (p >= n_rot / 2 || r >= n_vec) return;
    if (vec_stride > 0 && (int)(r % vec_stride) >= n_rows) return;
    /* angle = pos * freq with freq = freq[2p] + freq[2p+1] (an f64 value split into two f32):
     * hi + e carries the product to ~2^-48 relative; the reduction modulo 2 pi subtracts k * 2 pi
     * in three fma steps (Cody-Waite), so the reduced angle is accurate to ~1e-7 absolute even for
     * positions in the 10^4..10^6 range, close to the CPU backend's f64 angles. */
    float pf = (float)pos[pos_off + r / pos_div];
    float fh = freq[2 * p], fl = freq[2 * p + 1];
    float hi = pf * fh;
    float e = fma(pf, fh, -hi) + pf * fl;
    float k = rint(hi * 0.159154943091895336f);
    float ang = fma(-k, 6.28318548202514648f, hi);
    ang = fma(-k, -1.74845553146951715e-7f, ang);
    ang = fma(-k, -6.86049804e-15f, ang) + e;
    float cs = cos(ang), sn = sin(ang);
    long i0 = neox ? p : 2 * p;
    long i1 = neox ? p + n_rot / 2 : 2 * p + 1;
    DST_PTR v = x + x_off + r * head_dim;
    float a = LOAD_DST(v, i0), b = LOAD_DST(v, i1);
    float na = a * cs - b * sn;
    float nb = a * sn + b * cs;
    STORE_DST(v, i0, na);
    STORE_DST(v, i1, nb);
}

/* ---- GEMV for small batches with native weight storage ---- */

/* y[i][r] (+)= sum_c W[r][c] x[i][c]; one work-group per (output r, row i). W of SRC_T ([m][k]).
 * Deterministic tree reduction. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void gemv(SRC_PTR W, long w_off, __global const float *x, long x_off, __global float *y, long y_off,
          int m, int k, int accumulate) {
    __local float sh[WG];
    int r = get_group_id(0);
    int i = get_group_id(1);
    int lid = get_local_id(0);
    __global const float *xr = x + x_off + (long)i * k;
    float acc = 0.0f;
    long base = w_off + (long)r * k;
    for (int c = lid; c < k; c += WG) acc += LOAD_SRC(W, base + c) * xr[c];
    float s = wg_sum(sh, acc);
    if (lid == 0) {
        long o = y_off + (long)i * m + r;
        y[o] = accumulate ? y[o] + s : s;
    }
}
