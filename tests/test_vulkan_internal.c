/* Vulkan backend internals (backends/vulkan), on the first Vulkan device (lavapipe by default, the
 * validation layer on through the suite's environment); exits 77 (skip) without one.
 *
 * - Arena reservations (memory.c): inside an op, a scratch or staging take beyond what the op
 *   reserved is KVS_ERR_INTERNAL and leaves the recorded commands and the arena as they were (no
 *   flush, which would reset memory the op's commands still read, e.g. split-K partials); a second
 *   reservation after a take is refused the same way; takes within the reservation (up to 8,
 *   each rounded up to the binding alignment) never overlap; outside an op (transfers) a take that
 *   does not fit submits and grows the arena as before.
 * - The generated shader enum (vk_shader_ids.h): KVS_VK_SH_<NAME> indexes the table entry of
 *   NAME.comp, every entry is SPIR-V, and an out-of-range id is KVS_ERR_INTERNAL.
 * - The push-constant structs of vk_params.h against the compiled shaders: for every shader the
 *   push-constant block read back from its embedded SPIR-V (member offsets and block size) equals
 *   the C struct the host fills (offsetof of every field, sizeof), so the one shared definition is
 *   checked against what glslang actually laid out, not only against the std430 rules. */
#include <check.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/vulkan/vk_internal.h"
#include "kvsieve/kvsieve.h"
#include "probe.h"

static kvs_device_params g_params;

static kvs_device *open_vk(kvs_vk **v) {
    kvs_device *dev = NULL;
    kvs_status s = kvs_device_open(&dev, &g_params);
    ck_assert_msg(s == KVS_OK, "kvs_device_open: %s", kvs_last_error());
    *v = kvs_vk_of(dev);
    return dev;
}

/* Over-reaching takes inside an op: refused, nothing flushed or moved. */
START_TEST(take_beyond_reservation) {
    kvs_vk *v;
    kvs_device *dev = open_vk(&v);
    ck_assert_int_eq(kvs_vk_begin_op(v, "test_op"), KVS_OK);
    ck_assert_int_eq(kvs_vk_reserve(v, 4096, 256), KVS_OK);
    kvs_vk_alloc *a;
    VkDeviceSize off;
    ck_assert_int_eq(kvs_vk_scratch(v, 1024, &a, &off), KVS_OK);
    /* a recorded command that reads/writes the take, as an op's first dispatch would */
    ck_assert_int_eq(kvs_vk_fill(v, a->block->buf, off, 1024, 0x3f800000u), KVS_OK);
    ck_assert_int_eq(v->recording, 1);
    const VkDeviceSize used = v->scratch.used;
    const kvs_vk_alloc *arena = v->scratch.a;

    kvs_vk_alloc *b = NULL;
    VkDeviceSize boff = 0;
    kvs_status s = kvs_vk_scratch(v, (VkDeviceSize)1 << 30, &b, &boff);
    ck_assert_int_eq(s, KVS_ERR_INTERNAL);
    ck_assert_msg(strstr(kvs_last_error(), "test_op") && strstr(kvs_last_error(), "reserved") &&
                      strstr(kvs_last_error(), "scratch"),
                  "message: %s", kvs_last_error());
    ck_assert_int_eq(v->recording, 1); /* not submitted */
    ck_assert_uint_eq(v->scratch.used, used);
    ck_assert_ptr_eq(v->scratch.a, arena);

    /* just past the reservation: 4096 + 8 alignments of slack were reserved, 1024 taken */
    VkDeviceSize left = v->scratch.limit - v->scratch.used;
    ck_assert_int_eq(kvs_vk_scratch(v, left + 1, &b, &boff), KVS_ERR_INTERNAL);
    ck_assert_int_eq(kvs_vk_scratch(v, left, &b, &boff), KVS_OK); /* exactly the rest fits */
    ck_assert_int_eq(kvs_vk_scratch(v, 4, &b, &boff), KVS_ERR_INTERNAL);

    /* staging: 256 (+ slack) reserved */
    void *host;
    ck_assert_int_eq(kvs_vk_stage(v, 256, &b, &boff, &host), KVS_OK);
    ck_assert_int_eq(kvs_vk_stage(v, (VkDeviceSize)1 << 28, &b, &boff, &host), KVS_ERR_INTERNAL);
    ck_assert_msg(strstr(kvs_last_error(), "staging"), "message: %s", kvs_last_error());

    /* a second reservation after a take could flush: refused */
    ck_assert_int_eq(kvs_vk_reserve(v, 1 << 20, 0), KVS_ERR_INTERNAL);
    ck_assert_msg(strstr(kvs_last_error(), "test_op"), "message: %s", kvs_last_error());
    ck_assert_int_eq(v->recording, 1);

    /* the recorded fill still runs and its memory was never reused */
    ck_assert_int_eq(kvs_vk_flush(v), KVS_OK);
    ck_assert_int_eq(kvs_vk_check(v, "test_op"), KVS_OK);
    kvs_device_destroy(&dev);
}
END_TEST

/* An op that reserved nothing may take nothing. */
START_TEST(take_without_reservation) {
    kvs_vk *v;
    kvs_device *dev = open_vk(&v);
    ck_assert_int_eq(kvs_vk_begin_op(v, "test_op"), KVS_OK);
    kvs_vk_alloc *a;
    VkDeviceSize off;
    void *host;
    ck_assert_int_eq(kvs_vk_scratch(v, 16, &a, &off), KVS_ERR_INTERNAL);
    ck_assert_int_eq(kvs_vk_stage(v, 16, &a, &off, &host), KVS_ERR_INTERNAL);
    /* reserving scratch only leaves staging closed */
    ck_assert_int_eq(kvs_vk_reserve(v, 64, 0), KVS_OK);
    ck_assert_int_eq(kvs_vk_scratch(v, 64, &a, &off), KVS_OK);
    ck_assert_int_eq(kvs_vk_stage(v, 16, &a, &off, &host), KVS_ERR_INTERNAL);
    kvs_device_destroy(&dev);
}
END_TEST

/* Up to 8 takes of odd sizes within one reservation: all granted, disjoint, aligned. */
START_TEST(takes_within_reservation) {
    kvs_vk *v;
    kvs_device *dev = open_vk(&v);
    ck_assert_int_eq(kvs_vk_begin_op(v, "test_op"), KVS_OK);
    const VkDeviceSize sz[8] = {1, 13, 1000, 4096, 33, 7, 100000, 3};
    VkDeviceSize total = 0;
    for (int i = 0; i < 8; i++) total += sz[i];
    ck_assert_int_eq(kvs_vk_reserve(v, total, total), KVS_OK);
    kvs_vk_alloc *a[8];
    VkDeviceSize off[8];
    for (int i = 0; i < 8; i++) {
        ck_assert_int_eq(kvs_vk_scratch(v, sz[i], &a[i], &off[i]), KVS_OK);
        ck_assert_ptr_eq(a[i], a[0]);
        ck_assert_uint_eq(off[i] % v->align, 0);
        for (int j = 0; j < i; j++) ck_assert(off[j] + sz[j] <= off[i] || off[i] + sz[i] <= off[j]);
    }
    for (int i = 0; i < 8; i++) {
        void *host;
        kvs_vk_alloc *b;
        VkDeviceSize o;
        ck_assert_int_eq(kvs_vk_stage(v, sz[i], &b, &o, &host), KVS_OK);
        memset(host, 0xab, (size_t)sz[i]); /* mapped and writable */
    }
    kvs_device_destroy(&dev);
}
END_TEST

/* Outside an op (as in upload/download), a take larger than the arena submits and grows it. */
START_TEST(take_outside_op_may_flush) {
    kvs_vk *v;
    kvs_device *dev = open_vk(&v);
    ck_assert_int_eq(kvs_vk_begin_op(v, "test_op"), KVS_OK);
    ck_assert_int_eq(kvs_vk_reserve(v, 1024, 0), KVS_OK);
    kvs_vk_alloc *a;
    VkDeviceSize off;
    ck_assert_int_eq(kvs_vk_scratch(v, 1024, &a, &off), KVS_OK);
    ck_assert_int_eq(kvs_vk_fill(v, a->block->buf, off, 1024, 0u), KVS_OK);
    kvs_vk_end_op(v);
    const VkDeviceSize big = v->scratch.a->size + 4096;
    ck_assert_int_eq(kvs_vk_scratch(v, big, &a, &off), KVS_OK);
    ck_assert_int_eq(v->recording, 0); /* the pending fill was submitted first */
    ck_assert(v->scratch.a->size >= big);
    /* and through the public API: an upload and download after an op */
    kvs_tensor *t = NULL;
    int64_t ne[1] = {1000};
    ck_assert_int_eq(kvs_tensor_create(&t, dev, KVS_F32, 1, ne), KVS_OK);
    float x[1000], y[1000];
    for (int i = 0; i < 1000; i++) x[i] = (float)i * 0.5f;
    ck_assert_int_eq(kvs_tensor_upload(t, x, 0, sizeof x), KVS_OK);
    ck_assert_int_eq(kvs_tensor_download(t, y, 0, sizeof y), KVS_OK);
    ck_assert(memcmp(x, y, sizeof x) == 0);
    kvs_tensor_destroy(&t);
    kvs_device_destroy(&dev);
}
END_TEST

START_TEST(shader_enum) {
    static const struct { kvs_vk_shader_id id; const char *name; } want[] = {
        {KVS_VK_SH_ADD, "add"}, {KVS_VK_SH_MATMUL_VEC, "matmul_vec"}, {KVS_VK_SH_ATTN, "attn"},
        {KVS_VK_SH_ATTN_COMBINE, "attn_combine"}, {KVS_VK_SH_TOPK_WRITE, "topk_write"},
        {KVS_VK_SH_SCATTER_WIN, "scatter_win"}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        ck_assert_str_eq(kvs_vk_shader_table[want[i].id].name, want[i].name);
    for (int i = 0; i < KVS_VK_SH_COUNT; i++) {
        const kvs_vk_shader *s = &kvs_vk_shader_table[i];
        ck_assert_ptr_nonnull(s->name);
        ck_assert_uint_gt(s->size, 20);
        ck_assert_uint_eq(s->size % 4, 0);
        ck_assert_uint_eq(s->code[0], 0x07230203u); /* SPIR-V magic */
        for (int j = 0; j < i; j++) ck_assert_str_ne(kvs_vk_shader_table[j].name, s->name);
    }
    kvs_vk *v;
    kvs_device *dev = open_vk(&v);
    VkPipeline p;
    uint32_t spec[1] = {64};
    ck_assert_int_eq(kvs_vk_get_pipeline(v, KVS_VK_SH_COUNT, spec, 1, &p), KVS_ERR_INTERNAL);
    ck_assert_int_eq(kvs_vk_get_pipeline(v, KVS_VK_SH_ADD, spec, 1, &p), KVS_OK);
    kvs_device_destroy(&dev);
}
END_TEST

/* ---- push-constant layouts from SPIR-V -------------------------------------------------------- */

/* The push-constant block of a SPIR-V module: member offsets and the block's size in bytes. */
typedef struct {
    int n;
    uint32_t off[40];
    uint32_t size;
} pc_layout;

enum { OP_TYPE_INT = 21, OP_TYPE_FLOAT = 22, OP_TYPE_ARRAY = 28, OP_TYPE_STRUCT = 30, OP_TYPE_POINTER = 32,
       OP_CONSTANT = 43, OP_VARIABLE = 59, OP_DECORATE = 71, OP_MEMBER_DECORATE = 72,
       DEC_ARRAY_STRIDE = 6, DEC_OFFSET = 35, SC_PUSH_CONSTANT = 9 };

/* Bytes of scalar / array type `id` (arrays: ArrayStride x length). 0 when unknown. */
static uint32_t spv_size(const uint32_t *w, const size_t *def, const uint32_t *stride, uint32_t id, int depth) {
    if (!def[id] || depth > 4) return 0;
    const uint32_t *in = w + def[id];
    uint32_t op = in[0] & 0xffffu;
    if (op == OP_TYPE_INT || op == OP_TYPE_FLOAT) return in[2] / 8;
    if (op == OP_TYPE_ARRAY) {
        uint32_t len_id = in[3];
        if (!def[len_id] || (w[def[len_id]] & 0xffffu) != OP_CONSTANT) return 0;
        uint32_t len = w[def[len_id] + 3];
        uint32_t es = stride[id] ? stride[id] : spv_size(w, def, stride, in[2], depth + 1);
        return es * len;
    }
    return 0;
}

/* Fills *out from the module's PushConstant variable. Returns 0 when it has none or is malformed. */
static int spv_push_layout(const uint32_t *w, size_t nwords, pc_layout *out) {
    memset(out, 0, sizeof *out);
    if (nwords < 5 || w[0] != 0x07230203u) return 0;
    const uint32_t bound = w[3];
    size_t *def = calloc(bound, sizeof *def);      /* word index of the instruction defining id */
    uint32_t *stride = calloc(bound, sizeof *stride);
    if (!def || !stride) {
        free(def);
        free(stride);
        return 0;
    }
    uint32_t block = 0;
    for (size_t i = 5; i < nwords;) {
        uint32_t wc = w[i] >> 16, op = w[i] & 0xffffu;
        if (wc == 0 || i + wc > nwords) break;
        uint32_t rid = 0;
        if (op == OP_TYPE_INT || op == OP_TYPE_FLOAT || op == OP_TYPE_ARRAY || op == OP_TYPE_STRUCT ||
            op == OP_TYPE_POINTER)
            rid = w[i + 1];
        else if (op == OP_CONSTANT || op == OP_VARIABLE)
            rid = w[i + 2];
        if (rid && rid < bound) def[rid] = i;
        if (op == OP_DECORATE && wc >= 4 && w[i + 2] == DEC_ARRAY_STRIDE && w[i + 1] < bound)
            stride[w[i + 1]] = w[i + 3];
        if (op == OP_VARIABLE && wc >= 4 && w[i + 3] == SC_PUSH_CONSTANT) {
            uint32_t ptr = w[i + 1];
            if (ptr < bound && def[ptr] && (w[def[ptr]] & 0xffffu) == OP_TYPE_POINTER) block = w[def[ptr] + 3];
        }
        i += wc;
    }
    int ok = 0;
    if (block && block < bound && def[block] && (w[def[block]] & 0xffffu) == OP_TYPE_STRUCT) {
        const uint32_t *st = w + def[block];
        int nm = (int)(st[0] >> 16) - 2;
        if (nm > 0 && nm <= 40) {
            out->n = nm;
            for (size_t i = 5; i < nwords;) {
                uint32_t wc = w[i] >> 16, op = w[i] & 0xffffu;
                if (wc == 0) break;
                if (op == OP_MEMBER_DECORATE && wc >= 5 && w[i + 1] == block && w[i + 3] == DEC_OFFSET &&
                    w[i + 2] < (uint32_t)nm)
                    out->off[w[i + 2]] = w[i + 4];
                i += wc;
            }
            uint32_t last = st[2 + nm - 1];
            out->size = out->off[nm - 1] + spv_size(w, def, stride, last, 0);
            ok = 1;
        }
    }
    free(def);
    free(stride);
    return ok;
}

/* offsetof of every field of a KVS_VK_PC_* list, for the struct named by PC_T at expansion time. */
#define OFF_U(x) (uint32_t) offsetof(PC_T, x),
#define OFF_FA(x, n) (uint32_t) offsetof(PC_T, x),
#define PC_OFFSETS(LIST) {LIST(OFF_U, OFF_U, OFF_FA)}

typedef struct {
    const uint32_t *off;
    int n;
    size_t size;
} c_layout;
#define C_LAYOUT(arr, type) {arr, (int)(sizeof arr / sizeof arr[0]), sizeof(type)}

#define PC_T kvs_vk_pc_binary
static const uint32_t off_binary[] = PC_OFFSETS(KVS_VK_PC_BINARY);
#undef PC_T
#define PC_T kvs_vk_pc_copy
static const uint32_t off_copy[] = PC_OFFSETS(KVS_VK_PC_COPY);
#undef PC_T
#define PC_T kvs_vk_pc_rmsnorm
static const uint32_t off_rmsnorm[] = PC_OFFSETS(KVS_VK_PC_RMSNORM);
#undef PC_T
#define PC_T kvs_vk_pc_softmax
static const uint32_t off_softmax[] = PC_OFFSETS(KVS_VK_PC_SOFTMAX);
#undef PC_T
#define PC_T kvs_vk_pc_embedding
static const uint32_t off_embedding[] = PC_OFFSETS(KVS_VK_PC_EMBEDDING);
#undef PC_T
#define PC_T kvs_vk_pc_matmul
static const uint32_t off_matmul[] = PC_OFFSETS(KVS_VK_PC_MATMUL);
#undef PC_T
#define PC_T kvs_vk_pc_rope
static const uint32_t off_rope[] = PC_OFFSETS(KVS_VK_PC_ROPE);
#undef PC_T
#define PC_T kvs_vk_pc_attn
static const uint32_t off_attn[] = PC_OFFSETS(KVS_VK_PC_ATTN);
#undef PC_T
#define PC_T kvs_vk_pc_attn_combine
static const uint32_t off_attn_combine[] = PC_OFFSETS(KVS_VK_PC_ATTN_COMBINE);
#undef PC_T
#define PC_T kvs_vk_pc_attn_lse
static const uint32_t off_attn_lse[] = PC_OFFSETS(KVS_VK_PC_ATTN_LSE);
#undef PC_T
#define PC_T kvs_vk_pc_attn_stats
static const uint32_t off_attn_stats[] = PC_OFFSETS(KVS_VK_PC_ATTN_STATS);
#undef PC_T
#define PC_T kvs_vk_pc_dwt
static const uint32_t off_dwt[] = PC_OFFSETS(KVS_VK_PC_DWT);
#undef PC_T
#define PC_T kvs_vk_pc_rows
static const uint32_t off_rows[] = PC_OFFSETS(KVS_VK_PC_ROWS);
#undef PC_T
#define PC_T kvs_vk_pc_scatter_win
static const uint32_t off_scatter_win[] = PC_OFFSETS(KVS_VK_PC_SCATTER_WIN);
#undef PC_T
#define PC_T kvs_vk_pc_topk_select
static const uint32_t off_topk_select[] = PC_OFFSETS(KVS_VK_PC_TOPK_SELECT);
#undef PC_T
#define PC_T kvs_vk_pc_topk_hist
static const uint32_t off_topk_hist[] = PC_OFFSETS(KVS_VK_PC_TOPK_HIST);
#undef PC_T
#define PC_T kvs_vk_pc_topk_collect
static const uint32_t off_topk_collect[] = PC_OFFSETS(KVS_VK_PC_TOPK_COLLECT);
#undef PC_T
#define PC_T kvs_vk_pc_topk_sort
static const uint32_t off_topk_sort[] = PC_OFFSETS(KVS_VK_PC_TOPK_SORT);
#undef PC_T
#define PC_T kvs_vk_pc_topk_write
static const uint32_t off_topk_write[] = PC_OFFSETS(KVS_VK_PC_TOPK_WRITE);
#undef PC_T
#define PC_T kvs_vk_pc_topp
static const uint32_t off_topp[] = PC_OFFSETS(KVS_VK_PC_TOPP);
#undef PC_T
#define PC_T kvs_vk_pc_scatter_cvt
static const uint32_t off_scatter_cvt[] = PC_OFFSETS(KVS_VK_PC_SCATTER_CVT);
#undef PC_T

/* The C struct the host fills for each shader's push constants (ops_*.c). */
static c_layout c_layout_of(kvs_vk_shader_id id) {
    static const c_layout none = {NULL, 0, 0};
    switch (id) {
    case KVS_VK_SH_ADD: case KVS_VK_SH_LOG_MASS: case KVS_VK_SH_SWIGLU: return (c_layout)C_LAYOUT(off_binary, kvs_vk_pc_binary);
    case KVS_VK_SH_COPY: return (c_layout)C_LAYOUT(off_copy, kvs_vk_pc_copy);
    case KVS_VK_SH_RMSNORM: return (c_layout)C_LAYOUT(off_rmsnorm, kvs_vk_pc_rmsnorm);
    case KVS_VK_SH_SOFTMAX: return (c_layout)C_LAYOUT(off_softmax, kvs_vk_pc_softmax);
    case KVS_VK_SH_EMBEDDING: return (c_layout)C_LAYOUT(off_embedding, kvs_vk_pc_embedding);
    case KVS_VK_SH_ROPE: return (c_layout)C_LAYOUT(off_rope, kvs_vk_pc_rope);
    case KVS_VK_SH_MATMUL: case KVS_VK_SH_MATMUL_VEC: return (c_layout)C_LAYOUT(off_matmul, kvs_vk_pc_matmul);
    case KVS_VK_SH_ATTN: return (c_layout)C_LAYOUT(off_attn, kvs_vk_pc_attn);
    case KVS_VK_SH_ATTN_STATS: return (c_layout)C_LAYOUT(off_attn_stats, kvs_vk_pc_attn_stats);
    case KVS_VK_SH_ATTN_COMBINE: return (c_layout)C_LAYOUT(off_attn_combine, kvs_vk_pc_attn_combine);
    case KVS_VK_SH_ATTN_LSE: return (c_layout)C_LAYOUT(off_attn_lse, kvs_vk_pc_attn_lse);
    case KVS_VK_SH_DWT: case KVS_VK_SH_IDWT: return (c_layout)C_LAYOUT(off_dwt, kvs_vk_pc_dwt);
    case KVS_VK_SH_TOPK_HIST: return (c_layout)C_LAYOUT(off_topk_hist, kvs_vk_pc_topk_hist);
    case KVS_VK_SH_TOPK_SELECT: return (c_layout)C_LAYOUT(off_topk_select, kvs_vk_pc_topk_select);
    case KVS_VK_SH_TOPK_COLLECT: return (c_layout)C_LAYOUT(off_topk_collect, kvs_vk_pc_topk_collect);
    case KVS_VK_SH_TOPK_SORT: return (c_layout)C_LAYOUT(off_topk_sort, kvs_vk_pc_topk_sort);
    case KVS_VK_SH_TOPK_WRITE: return (c_layout)C_LAYOUT(off_topk_write, kvs_vk_pc_topk_write);
    case KVS_VK_SH_ROWS_COPY: return (c_layout)C_LAYOUT(off_rows, kvs_vk_pc_rows);
    case KVS_VK_SH_SCATTER_WIN: return (c_layout)C_LAYOUT(off_scatter_win, kvs_vk_pc_scatter_win);
    case KVS_VK_SH_SCATTER_CVT: return (c_layout)C_LAYOUT(off_scatter_cvt, kvs_vk_pc_scatter_cvt);
    case KVS_VK_SH_TOPP: return (c_layout)C_LAYOUT(off_topp, kvs_vk_pc_topp);
    default: return none;
    }
}

/* Every shader's SPIR-V push-constant block equals its C struct, member by member. */
START_TEST(push_constant_layouts) {
    for (int i = 0; i < KVS_VK_SH_COUNT; i++) {
        const kvs_vk_shader *sh = &kvs_vk_shader_table[i];
        c_layout c = c_layout_of((kvs_vk_shader_id)i);
        ck_assert_msg(c.n > 0, "shader %s: no C push-constant struct listed in this test", sh->name);
        pc_layout g;
        ck_assert_msg(spv_push_layout(sh->code, sh->size / 4, &g), "shader %s: no push-constant block in its SPIR-V",
                      sh->name);
        ck_assert_msg(g.n == c.n, "shader %s: %d push-constant members in SPIR-V, %d fields in C", sh->name, g.n, c.n);
        for (int m = 0; m < c.n; m++)
            ck_assert_msg(g.off[m] == c.off[m], "shader %s: member %d at byte %u in SPIR-V, %u in C", sh->name, m,
                          g.off[m], c.off[m]);
        ck_assert_msg(g.size == c.size, "shader %s: block of %u bytes in SPIR-V, C struct %zu", sh->name, g.size,
                      c.size);
        ck_assert_uint_le(c.size, KVS_VK_PUSH_BYTES);
    }
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("vulkan_internal");
    TCase *tc = tcase_create("arena");
    tcase_add_test(tc, take_beyond_reservation);
    tcase_add_test(tc, take_without_reservation);
    tcase_add_test(tc, takes_within_reservation);
    tcase_add_test(tc, take_outside_op_may_flush);
    suite_add_tcase(s, tc);
    TCase *ts = tcase_create("shaders");
    tcase_add_test(ts, shader_enum);
    tcase_add_test(ts, push_constant_layouts);
    suite_add_tcase(s, ts);
    return s;
}

int main(int argc, char **argv) {
    const char *icd = getenv("KVS_TEST_VK_DEFAULT_ICD");
    if (!getenv("VK_DRIVER_FILES") && !getenv("VK_ICD_FILENAMES") && icd && icd[0] && access(icd, R_OK) == 0)
        setenv("VK_DRIVER_FILES", icd, 1);
    char *args[] = {argv[0], "--backend", "vulkan"};
    (void)argc;
    int setup = kvs_test_setup(3, args, "test_vulkan_internal", &g_params, NULL, NULL, 0);
    if (setup >= 0) return setup;
    return kvs_test_run(suite());
}
