#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
// RoPE (Su et al. 2021, eq. 34) and re-rotation of stored keys (rope_shift): rotates pair i of
// every visited vector by theta_i = pos * freq_i, pairs (x[2i], x[2i+1]) (ADJACENT) or
// (x[i], x[i+n_rot/2]) (NEOX). x: [n_vec][head_dim] F32 (in place) or F16 (rope_shift keys);
// pos: I32, vector r uses pos[r / pos_div]. Visited vectors: rope: all; rope_shift: rows
// [0, n_rows) of each block of `stride` rows (a kv head), t = (r / stride) * n_rows + r % stride.
// Angles: freq_i / (2 pi) comes as a 64-bit fixed-point fraction (fq[2i] high word, fq[2i+1] low),
// so pos * freq_i is reduced modulo one turn exactly in integer arithmetic; sin/cos then use
// minimax polynomials on [-pi/4, pi/4] (Cephes sinf/cosf), accurate to ~1e-7 for any position
// (the CPU backend evaluates angle and trigonometry in f64).
// MODE 0: f32 in place, one invocation per pair. MODE 1: f16 phase 1, rotated values (f32) to
// scratch [visited][n_rot]. MODE 2: f16 phase 2, one invocation per 32-bit word of x writes back.
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint MODE = 0;
layout(constant_id = 2) const uint NEOX = 0;
layout(std430, binding = 0) buffer X { uint d[]; } x;
layout(std430, binding = 1) readonly buffer Pos { uint d[]; } pos;
layout(std430, binding = 2) readonly buffer Fq { uint d[]; } fq;
layout(std430, binding = 3) buffer S { uint d[]; } scr;
// total: modes F32 / F16_ROTATE visited vectors * n_rot/2; mode F16_STORE words of x to visit
KVS_VK_PUSH(KVS_VK_PC_ROPE)

const float TWO_PI_2M32 = 1.4629180792671596e-9; // 2 pi / 2^32

// cos and sin of 2 pi * frac(pos * f), f a 64-bit fixed-point fraction (hi, lo)
vec2 cossin(int ps, uint fhi, uint flo) {
    uint u = uint(abs(ps));
    uint h1, l1, h0, l0;
    umulExtended(u, fhi, h1, l1);
    umulExtended(u, flo, h0, l0);
    uint top = l1 + h0;   // fraction bits 2^-1 .. 2^-32
    uint low = l0;        // 2^-33 .. 2^-64
    if (ps < 0) {         // negate the 64-bit fraction
        low = ~low + 1u;
        top = ~top + (low == 0u ? 1u : 0u);
    }
    uint q = (top + 0x20000000u) >> 30u;
    int rem = int(top - (q << 30u));
    float r = (float(rem) + float(low) * 2.3283064365386963e-10) * TWO_PI_2M32;
    float z = r * r;
    float s = ((-1.9515295891e-4 * z + 8.3321608736e-3) * z - 1.6666654611e-1) * z * r + r;
    float c = ((2.443315711809948e-5 * z - 1.388731625493765e-3) * z + 4.166664568298827e-2) * z * z - 0.5 * z + 1.0;
    if (q == 0u) return vec2(c, s);
    if (q == 1u) return vec2(-s, c);
    if (q == 2u) return vec2(-c, -s);
    return vec2(s, -c);
}

void main() {
    uint t = LIN_GROUP * WGX + TID;
    if (t >= p.total) return;
    uint half_ = p.n_rot / 2u;
    if (MODE == KVS_VK_ROPE_F16_STORE) {
        uint w = (p.ox >> 1u) + t;
        uint old = x.d[w];
        uint outw = old;
        for (uint h = 0u; h < 2u; h++) {
            int e = int(2u * w + h) - int(p.ox);
            if (e < 0 || e >= int(p.nx)) continue;
            uint r = uint(e) / p.head_dim, c = uint(e) % p.head_dim;
            uint row = r % p.stride;
            if (c >= p.n_rot || row >= p.n_rows) continue;
            uint vi = (r / p.stride) * p.n_rows + row;
            uint hv = f2h(uintBitsToFloat(scr.d[p.os + vi * p.n_rot + c]));
            outw = (h == 0u) ? ((outw & 0xffff0000u) | hv) : ((outw & 0xffffu) | (hv << 16u));
        }
        if (outw != old) x.d[w] = outw;
        return;
    }
    uint vi = t / half_, i = t % half_;
    uint r = (vi / p.n_rows) * p.stride + vi % p.n_rows;
    int ps = int(pos.d[p.op + r / p.pos_div]);
    vec2 cs = cossin(ps, fq.d[p.of + 2u * i], fq.d[p.of + 2u * i + 1u]);
    uint ia = NEOX != 0u ? i : 2u * i;
    uint ib = NEOX != 0u ? i + half_ : 2u * i + 1u;
    uint base = r * p.head_dim;
    float a, b;
    if (MODE == KVS_VK_ROPE_F32) {
        a = F32(x, p.ox + base + ia);
        b = F32(x, p.ox + base + ib);
    } else {
        a = h2f(H16(x, p.ox + base + ia));
        b = h2f(H16(x, p.ox + base + ib));
    }
    float na = a * cs.x - b * cs.y;
    float nb = a * cs.y + b * cs.x;
    if (MODE == KVS_VK_ROPE_F32) {
        x.d[p.ox + base + ia] = floatBitsToUint(na);
        x.d[p.ox + base + ib] = floatBitsToUint(nb);
    } else {
        scr.d[p.os + vi * p.n_rot + ia] = floatBitsToUint(na);
        scr.d[p.os + vi * p.n_rot + ib] = floatBitsToUint(nb);
    }
}
