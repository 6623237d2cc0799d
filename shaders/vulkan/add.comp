#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
// y = a + b, element-wise, F32. a, b, y: [n] (y may alias a or b).
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) readonly buffer A { uint d[]; } a;
layout(std430, binding = 1) readonly buffer B { uint d[]; } b;
layout(std430, binding = 2) buffer Y { uint d[]; } y;
KVS_VK_PUSH(KVS_VK_PC_BINARY)
void main() {
    uint i = LIN_GROUP * WGX + TID;
    if (i >= p.n) return;
    y.d[p.oy + i] = floatBitsToUint(F32(a, p.oa + i) + F32(b, p.ob + i));
}
