#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
// y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w. x, y: [rows][dim] F32, w: [dim]. One workgroup per row;
// the sum of squares is reduced in a fixed tree order (deterministic).
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) readonly buffer X { uint d[]; } x;
layout(std430, binding = 1) readonly buffer W { uint d[]; } w;
layout(std430, binding = 2) buffer Y { uint d[]; } y;
KVS_VK_PUSH(KVS_VK_PC_RMSNORM)
shared float red[gl_WorkGroupSize.x];
void main() {
    uint r = LIN_GROUP;
    if (r >= p.rows) return;
    uint base = r * p.dim;
    float acc = 0.0;
    for (uint c = TID; c < p.dim; c += WGX) { float v = F32(x, p.ox + base + c); acc += v * v; }
    red[TID] = acc;
    barrier();
    for (uint s = WGX / 2u; s > 0u; s >>= 1u) {
        if (TID < s) red[TID] += red[TID + s];
        barrier();
    }
    float inv = 1.0 / sqrt(red[0] / float(p.dim) + p.eps);
    for (uint c = TID; c < p.dim; c += WGX)
        y.d[p.oy + base + c] = floatBitsToUint(F32(x, p.ox + base + c) * inv * F32(w, p.ow + c));
}
