#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
// out = silu(gate) * up, silu(g) = g / (1 + exp(-g)). gate, up, out: [n] F32 (out may alias).
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) readonly buffer G { uint d[]; } g;
layout(std430, binding = 1) readonly buffer U { uint d[]; } u;
layout(std430, binding = 2) buffer O { uint d[]; } o;
layout(push_constant) uniform P { uint n, og, ou, oo; } p;
void main() {
    uint i = LIN_GROUP * WGX + TID;
    if (i >= p.n) return;
    float x = F32(g, p.og + i);
    float s = x / (1.0 + exp(-x));
    o.d[p.oo + i] = floatBitsToUint(s * F32(u, p.ou + i));
}
