/* kvsieve OpenCL kernel: per-row top-p over mass (contract: kvs_topp in include/kvsieve/ops.h).
 *
 * One work-group per row (get_group_id(1) = row). The mass of an entry is its value when finite
 * and > 0, else 0; positive floats order like their bit patterns, so the threshold is found by a
 * bisection over its bits 30..0: M(t) = sum of the masses with bits >= t, and t grows bit by bit
 * while M(t) >= p * T (T = M(smallest positive)). The final t is the value of the count-th ranked
 * entry; count = #{m > t} + the fewest ties at t that reach p * T (all of them for p = 1). Every
 * sum is an f32 tree reduction in a fixed order (deterministic; masked-out entries add exact
 * zeros, so M over every positive entry equals T bit for bit and p = 1 keeps them all). */

#ifndef TP_WG
#define TP_WG 256 /* work-group size, a power of two */
#endif

inline float tp_mass(float v) { return (isfinite(v) && v > 0.0f) ? v : 0.0f; }

/* Work-group sums (every item calls them: they hold barriers); the result goes to every item. */
inline float tp_sumf(__local float *sh, float s, int lid) {
    barrier(CLK_LOCAL_MEM_FENCE);
    sh[lid] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int o = TP_WG / 2; o > 0; o >>= 1) {
        if (lid < o) sh[lid] += sh[lid + o];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    return sh[0];
}

inline uint tp_sumu(__local uint *sh, uint s, int lid) {
    barrier(CLK_LOCAL_MEM_FENCE);
    sh[lid] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int o = TP_WG / 2; o > 0; o >>= 1) {
        if (lid < o) sh[lid] += sh[lid + o];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    return sh[0];
}

/* x [rows][n] (element offset x_off); rl: row lengths when has_rl; p_one: p == 1;
 * cnt [rows] I32, thr [rows] F32 when has_thr. */
__kernel void tp_row(__global const float *x, long x_off, long n, __global const int *rl, long rl_off, int has_rl,
                     float p, int p_one, __global int *cnt, long c_off, __global float *thr, long t_off, int has_thr) {
    __local float shf[TP_WG];
    __local uint shu[TP_WG];
    const int lid = (int)get_local_id(0);
    const long row = (long)get_group_id(1);
    long len = n;
    if (has_rl) {
        len = rl[rl_off + row];
        len = len < 0 ? 0 : (len > n ? n : len);
    }
    __global const float *xr = x + x_off + row * n;
    float s = 0.0f;
    uint c = 0u;
    for (long j = lid; j < len; j += TP_WG) {
        float m = tp_mass(xr[j]);
        s += m;
        c += m > 0.0f ? 1u : 0u;
    }
    const float T = tp_sumf(shf, s, lid);
    const uint P = tp_sumu(shu, c, lid);
    if (P == 0u) { /* no mass: keep nothing (uniform branch) */
        if (lid == 0) {
            cnt[c_off + row] = 0;
            if (has_thr) thr[t_off + row] = INFINITY;
        }
        return;
    }
    const float target = p_one ? T : p * T;
    uint prefix = 0u;
    for (int bit = 30; bit >= 0; bit--) {
        uint cand = prefix | (1u << bit);
        s = 0.0f;
        for (long j = lid; j < len; j += TP_WG) {
            float m = tp_mass(xr[j]);
            if (as_uint(m) >= cand) s += m;
        }
        if (tp_sumf(shf, s, lid) >= target) prefix = cand;
    }
    float sg = 0.0f;
    uint cg = 0u, ce = 0u;
    for (long j = lid; j < len; j += TP_WG) {
        float m = tp_mass(xr[j]);
        uint b = as_uint(m);
        if (m > 0.0f) {
            if (b > prefix) {
                sg += m;
                cg++;
            } else if (b == prefix) {
                ce++;
            }
        }
    }
    const float mg = tp_sumf(shf, sg, lid);
    const uint CG = tp_sumu(shu, cg, lid), CE = tp_sumu(shu, ce, lid);
    if (lid == 0) {
        const float v = as_float(prefix);
        uint need = CE;
        if (!p_one) {
            float r = ceil((target - mg) / v);
            need = r < 1.0f ? 1u : (r >= (float)CE ? CE : (uint)r);
        }
        cnt[c_off + row] = (int)(CG + need);
        if (has_thr) thr[t_off + row] = v;
    }
}
