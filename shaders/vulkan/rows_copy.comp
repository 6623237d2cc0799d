#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
// Row copies of cache tensors seen as [G][N][row] (bit-exact, any dtype), in units of 32-bit words
// (U16 = 0: row bytes and offsets 4-aligned) or 16-bit halves (U16 = 1). Indices idx: [G][n] or
// [n] (idx_shared); an index outside the valid range skips that row (destination untouched).
// MODE 0 gather:  dst[g][i] = src[g][idx[g][i]], i < n.
// MODE 1 scatter: dst[g][t] = src row win[g][t] (the highest i with idx[g][i] = t, from
//                 scatter_win.comp); src is [G][n][row] or, with TOKMAJ, [n][G][row].
// U16 = 0: one invocation per (g, i, word) of the copied rows (gather) or of the src rows
// (scatter, which writes only if it is the winner). U16 = 1: one invocation per 32-bit word of the
// whole dst tensor, so two halves of one word are never written by different invocations.
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint MODE = 0;
layout(constant_id = 2) const uint U16 = 0;
layout(constant_id = 3) const uint TOKMAJ = 0;
layout(std430, binding = 0) readonly buffer S { uint d[]; } src;
layout(std430, binding = 1) readonly buffer I { uint d[]; } idx;
layout(std430, binding = 2) buffer Dd { uint d[]; } dst;
layout(std430, binding = 3) readonly buffer W { uint d[]; } win;
KVS_VK_PUSH(KVS_VK_PC_ROWS)

int index_of(uint g, uint i) { return int(idx.d[p.oi + (p.shared_ != 0u ? i : g * p.n + i)]); }

// source row (in src row units) for dst row (g, i), or -1 to keep dst
int src_row(uint g, uint i) {
    if (MODE == KVS_VK_ROWS_GATHER) {
        if (i >= p.n) return -1;
        int s = index_of(g, i);
        if (s < 0 || s >= int(p.Ns)) return -1;
        return int(g * p.Ns) + s;
    }
    int w = int(win.d[p.ow + g * p.Nd + i]);
    if (w < 0) return -1;
    return TOKMAJ != 0u ? w * int(p.G) + int(g) : int(g * p.n) + w;
}

void main() {
    uint t = LIN_GROUP * WGX + TID;
    if (t >= p.total) return;
    if (U16 == 0u) {
        uint row = t / p.RU, w = t % p.RU;
        uint g = row / p.n, i = row % p.n;
        if (MODE == KVS_VK_ROWS_GATHER) {
            int s = src_row(g, i);
            if (s >= 0) dst.d[p.od + (g * p.Nd + i) * p.RU + w] = src.d[p.os + uint(s) * p.RU + w];
        } else {
            int tt = index_of(g, i);
            if (tt < 0 || tt >= int(p.Nd)) return;
            if (int(win.d[p.ow + g * p.Nd + uint(tt)]) != int(i)) return;
            uint sr = TOKMAJ != 0u ? i * p.G + g : g * p.n + i;
            dst.d[p.od + (g * p.Nd + uint(tt)) * p.RU + w] = src.d[p.os + sr * p.RU + w];
        }
        return;
    }
    uint wd = (p.od >> 1u) + t;
    uint old = dst.d[wd], val = old;
    uint nd = p.G * p.Nd * p.RU;
    for (uint h = 0u; h < 2u; h++) {
        int e = int(2u * wd + h) - int(p.od);
        if (e < 0 || e >= int(nd)) continue;
        uint row = uint(e) / p.RU, c = uint(e) % p.RU;
        int s = src_row(row / p.Nd, row % p.Nd);
        if (s < 0) continue;
        uint hv = H16(src, p.os + uint(s) * p.RU + c);
        val = h == 0u ? ((val & 0xffff0000u) | hv) : ((val & 0xffffu) | (hv << 16u));
    }
    if (val != old) dst.d[wd] = val;
}
