#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
// y[i][r] = sum_c W[r][c] x[i][c] (+ y[i][r] if accumulate). W: [m][k] F32/F16/BF16 or one of the
// block types (spec constant DT; block types: offsets in bytes, k a multiple of the block), decoded
// to f32 while loading the shared tile (quant.glsl: each invocation decodes 4 consecutive weights of
// one block straight from W; no dequantized copy of W exists); x: [n][k] F32; y: [n][m] F32.
// Tiled GEMM: a workgroup of 256 invocations computes a 64 x 64 tile of y (4 x 4 per invocation),
// stepping through k in slices of 16 staged in shared memory (2 x 4.25 KiB). f32 accumulation in a
// fixed order: deterministic.
layout(local_size_x_id = 0) in; // must be 256
layout(constant_id = 1) const uint DT = 0;
layout(std430, binding = 0) readonly buffer Wb { uint d[]; } w;
layout(std430, binding = 1) readonly buffer Xb { uint d[]; } x;
layout(std430, binding = 2) buffer Yb { uint d[]; } y;
KVS_VK_PUSH(KVS_VK_PC_MATMUL)
#define QB w
#define QFN(x) w_##x
#include "quant.glsl"
#undef QB
#undef QFN
#define TM 64u
#define TN 64u
#define BK 16u
#define LDS 17u
shared float sW[TM * LDS];
shared float sX[TN * LDS];
void main() {
    uint g = LIN_GROUP;
    uint gm = g % p.groups_m, gn = g / p.groups_m;
    if (gn * TN >= p.n) return;
    uint m0 = gm * TM, n0 = gn * TN;
    uint tx = TID % 16u, ty = TID / 16u;
    float acc[4][4];
    for (uint i = 0u; i < 4u; i++)
        for (uint j = 0u; j < 4u; j++) acc[i][j] = 0.0;
    for (uint k0 = 0u; k0 < p.k; k0 += BK) {
        if (KVS_VK_IS_QUANT(DT)) {
            // one group of 4 weights per invocation (TM * BK / 4 = 256); k % 32 == 0, so the
            // slice [k0, k0 + 16) lies inside the rows
            uint r = TID / 4u, c = 4u * (TID % 4u);
            vec4 wv = vec4(0.0);
            if (m0 + r < p.m) wv = w_dq4(DT, p.ow, (m0 + r) * p.k + k0 + c);
            for (uint t = 0u; t < 4u; t++) sW[r * LDS + c + t] = wv[t];
            for (uint t = 0u; t < 4u; t++) {
                float xv = 0.0;
                if (n0 + r < p.n) xv = F32(x, p.ox + (n0 + r) * p.k + k0 + c + t);
                sX[r * LDS + c + t] = xv;
            }
        } else {
            for (uint l = TID; l < TM * BK; l += 256u) {
                uint r = l / BK, c = l % BK;
                uint gc = k0 + c;
                float wv = 0.0, xv = 0.0;
                if (m0 + r < p.m && gc < p.k) wv = LDF(w, p.ow + (m0 + r) * p.k + gc, DT);
                if (n0 + r < p.n && gc < p.k) xv = F32(x, p.ox + (n0 + r) * p.k + gc);
                sW[r * LDS + c] = wv;
                sX[r * LDS + c] = xv;
            }
        }
        barrier();
        for (uint kk = 0u; kk < BK; kk++) {
            float a[4], b[4];
            for (uint i = 0u; i < 4u; i++) a[i] = sW[(tx + 16u * i) * LDS + kk];
            for (uint j = 0u; j < 4u; j++) b[j] = sX[(ty + 16u * j) * LDS + kk];
            for (uint i = 0u; i < 4u; i++)
                for (uint j = 0u; j < 4u; j++) acc[i][j] += a[i] * b[j];
        }
        barrier();
    }
    for (uint i = 0u; i < 4u; i++)
        for (uint j = 0u; j < 4u; j++) {
            uint r = m0 + tx + 16u * i, c = n0 + ty + 16u * j;
            if (r < p.m && c < p.n) {
                uint o = p.oy + c * p.m + r;
                float v = acc[i][j];
                if (p.accumulate != 0u) v += F32(y, o);
                y.d[o] = floatBitsToUint(v);
            }
        }
}
