#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
// y[r][j] = exp(s*x[r][j] - m) / sum_j exp(s*x[r][j] - m), m = max_j s*x[r][j] (running maximum
// starts at -FLT_MAX; -inf entries get weight 0; an all -inf row gives zeros). [rows][n] F32.
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) readonly buffer X { uint d[]; } x;
layout(std430, binding = 1) buffer Y { uint d[]; } y;
KVS_VK_PUSH(KVS_VK_PC_SOFTMAX)
shared float red[gl_WorkGroupSize.x];
void main() {
    uint r = LIN_GROUP;
    if (r >= p.rows) return;
    uint base = r * p.n;
    float m = -FLT_MAX_;
    for (uint j = TID; j < p.n; j += WGX) m = max(m, p.scale * F32(x, p.ox + base + j));
    red[TID] = m;
    barrier();
    for (uint s = WGX / 2u; s > 0u; s >>= 1u) {
        if (TID < s) red[TID] = max(red[TID], red[TID + s]);
        barrier();
    }
    m = red[0];
    barrier();
    float acc = 0.0;
    for (uint j = TID; j < p.n; j += WGX) acc += exp(p.scale * F32(x, p.ox + base + j) - m);
    red[TID] = acc;
    barrier();
    for (uint s = WGX / 2u; s > 0u; s >>= 1u) {
        if (TID < s) red[TID] += red[TID + s];
        barrier();
    }
    float l = red[0];
    float inv = l != 0.0 ? 1.0 / l : 0.0; /* NaN propagates */
    for (uint j = TID; j < p.n; j += WGX)
        y.d[p.oy + base + j] = floatBitsToUint(exp(p.scale * F32(x, p.ox + base + j) - m) * inv);
}
