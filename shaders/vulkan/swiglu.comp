#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
// out = silu(gate) * up, silu(g) = g / (1 + exp(-g)). gate, up, out: [n] F32 (out may alias);
// push constants: gate at oa, up at ob, out at oy.
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) readonly buffer G { uint d[]; } g;
layout(std430, binding = 1) readonly buffer U { uint d[]; } u;
layout(std430, binding = 2) buffer O { uint d[]; } o;
KVS_VK_PUSH(KVS_VK_PC_BINARY)
void main() {
    uint i = LIN_GROUP * WGX + TID;
    if (i >= p.n) return;
    float x = F32(g, p.oa + i);
    float s = x / (1.0 + exp(-x));
    o.d[p.oy + i] = floatBitsToUint(s * F32(u, p.ob + i));
}
