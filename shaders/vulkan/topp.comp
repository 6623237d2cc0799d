#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
// Per-row top-p over mass (contract: kvs_topp in include/kvsieve/ops.h), one workgroup per row.
// Mass m = x when finite and > 0, else 0. Positive floats order like their bits, so the threshold
// is a bisection over bits 30..0: M(t) = sum of m with bits >= t; t grows while M(t) >= p T
// (T = sum of every m). Then count = #{m > t} + the fewest ties at t reaching p T (all for p = 1).
// Sums are f32 tree reductions in a fixed order (masked entries add exact zeros, so M over every
// positive entry equals T bit for bit). x [rows][n] F32; count [rows] I32; thr [rows] F32.
// The same algorithm as shaders/opencl/topp.cl.
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) readonly buffer X { uint d[]; } x;
layout(std430, binding = 1) readonly buffer RL { uint d[]; } rl;
layout(std430, binding = 2) writeonly buffer C { uint d[]; } cnt;
layout(std430, binding = 3) writeonly buffer T { uint d[]; } thr;
KVS_VK_PUSH(KVS_VK_PC_TOPP)
shared float shf[256];
shared uint shu[256];

float mass(float v) { return (!isnan(v) && !isinf(v) && v > 0.0) ? v : 0.0; }

float sumf(float s) {
    barrier();
    shf[TID] = s;
    barrier();
    for (uint o = WGX / 2u; o > 0u; o >>= 1u) {
        if (TID < o) shf[TID] += shf[TID + o];
        barrier();
    }
    return shf[0];
}

uint sumu(uint s) {
    barrier();
    shu[TID] = s;
    barrier();
    for (uint o = WGX / 2u; o > 0u; o >>= 1u) {
        if (TID < o) shu[TID] += shu[TID + o];
        barrier();
    }
    return shu[0];
}

void main() {
    uint row = LIN_GROUP;
    if (row >= p.rows) return; // whole workgroup
    uint len = p.n;
    if (p.has_rl != 0u) len = uint(clamp(int(rl.d[p.orl + row]), 0, int(p.n)));
    uint base = p.ox + row * p.n;
    float s = 0.0;
    uint c = 0u;
    for (uint j = TID; j < len; j += WGX) {
        float m = mass(F32(x, base + j));
        s += m;
        c += m > 0.0 ? 1u : 0u;
    }
    float total = sumf(s);
    uint npos = sumu(c);
    if (npos == 0u) {
        if (TID == 0u) {
            cnt.d[p.oc + row] = 0u;
            if (p.has_thr != 0u) thr.d[p.ot + row] = 0x7f800000u; // +inf
        }
        return;
    }
    float target = p.p_one != 0u ? total : p.p * total;
    uint prefix = 0u;
    for (int bit = 30; bit >= 0; bit--) {
        uint cand = prefix | (1u << uint(bit));
        s = 0.0;
        for (uint j = TID; j < len; j += WGX) {
            float m = mass(F32(x, base + j));
            if (floatBitsToUint(m) >= cand) s += m;
        }
        if (sumf(s) >= target) prefix = cand;
    }
    float sg = 0.0;
    uint cg = 0u, ce = 0u;
    for (uint j = TID; j < len; j += WGX) {
        float m = mass(F32(x, base + j));
        uint b = floatBitsToUint(m);
        if (m > 0.0) {
            if (b > prefix) {
                sg += m;
                cg++;
            } else if (b == prefix) {
                ce++;
            }
        }
    }
    float mg = sumf(sg);
    uint CG = sumu(cg), CE = sumu(ce);
    if (TID == 0u) {
        float v = uintBitsToFloat(prefix);
        uint need = CE;
        if (p.p_one == 0u) {
            float r = ceil((target - mg) / v);
            need = r < 1.0 ? 1u : (r >= float(CE) ? CE : uint(r));
        }
        cnt.d[p.oc + row] = CG + need;
        if (p.has_thr != 0u) thr.d[p.ot + row] = prefix;
    }
}
