/* Suite "tensor": device buffers on the backend under test: upload/download at offsets, views
 * (writes through a view land in the parent; views outlive their parent), fill, byte accounting,
 * bounds errors, and ops on views at unaligned element offsets (1, 3, 5 elements: byte offsets that
 * are not multiples of 4 or of any GPU buffer-offset alignment; a backend must honour the view
 * offset itself).
 */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "reference.h"
#include "suites.h"

START_TEST(test_upload_download) {
    t_begin("tensor_upload_download");
    static const kvs_dtype dts[] = {KVS_F32, KVS_F16, KVS_BF16, KVS_I32};
    for (int d = 0; d < 4; d++) {
        for (int64_t n = 1; n <= 1001; n += 500) {
            t_case("upload/download dtype=%s n=%lld", kvs_dtype_name(dts[d]), (long long)n);
            size_t nb = kvs_dtype_bytes(dts[d], n);
            unsigned char *a = t_alloc(nb), *b = t_alloc(nb);
            for (size_t i = 0; i < nb; i++) a[i] = (unsigned char)t_rand_u64();
            tt *t = t_new1(dts[d], n);
            t_upload(t, a);
            t_download(t, b);
            t_check_bytes("roundtrip", b, a, nb);
            /* partial transfers at odd byte offsets */
            size_t off = nb / 3, len = nb - off;
            memset(b, 0, nb);
            t_expect(kvs_tensor_download(t->t, b, off, len), KVS_OK, "partial download");
            t_check_bytes("partial download", b, a + off, len);
            for (size_t i = 0; i < len; i++) b[i] = (unsigned char)~a[off + i];
            t_expect(kvs_tensor_upload(t->t, b, off, len), KVS_OK, "partial upload");
            memcpy(t->shadow + t->guard + off, b, len);
            unsigned char *c = t_alloc(nb);
            t_download(t, c);
            t_check_bytes("unchanged prefix", c, a, off);
            t_check_bytes("uploaded suffix", c + off, b, len);
            /* bounds */
            t_expect(kvs_tensor_upload(t->t, a, 1, nb), KVS_ERR_OUT_OF_RANGE, "upload past the end");
            t_expect(kvs_tensor_download(t->t, b, nb + 1, 0), KVS_ERR_OUT_OF_RANGE, "download offset past the end");
            t_expect(kvs_tensor_upload(t->t, a, (size_t)-1, 2), KVS_ERR_OUT_OF_RANGE, "offset overflow");
            t_expect(kvs_tensor_upload(t->t, NULL, 0, 4), KVS_ERR_INVALID_ARGUMENT, "NULL src");
            t_download(t, NULL); /* guards intact */
        }
    }
    t_end();
}
END_TEST

START_TEST(test_views) {
    kvs_device *dev = t_begin("tensor_views");
    t_case("views: write through a view, view of a view, view outliving its parent");
    int64_t ne[2] = {8, 10};
    kvs_tensor *p = NULL, *v = NULL, *vv = NULL;
    ck_assert(kvs_tensor_create(&p, dev, KVS_F32, 2, ne) == KVS_OK);
    int64_t bytes0 = kvs_device_bytes_allocated(dev);
    float all[80], got[80], row[8];
    for (int i = 0; i < 80; i++) all[i] = (float)i;
    ck_assert(kvs_tensor_upload(p, all, 0, sizeof all) == KVS_OK);
    int64_t vne[2] = {8, 3};
    t_expect(kvs_tensor_view(&v, p, 2 * 8, 2, vne), KVS_OK, "view rows 2..4");
    T_ASSERT(kvs_device_bytes_allocated(dev) == bytes0, "a view must not allocate device memory");
    ck_assert_int_eq(kvs_tensor_nelements(v), 24);
    ck_assert_int_eq(kvs_tensor_ne(v, 1), 3);
    int64_t vvne[1] = {5};
    t_expect(kvs_tensor_view(&vv, v, 9, 1, vvne), KVS_OK, "view of a view");
    for (int i = 0; i < 8; i++) row[i] = -1.0f - (float)i;
    ck_assert(kvs_tensor_upload(vv, row, 0, 5 * 4) == KVS_OK);
    for (int i = 0; i < 5; i++) all[2 * 8 + 9 + i] = row[i];
    ck_assert(kvs_tensor_download(p, got, 0, sizeof got) == KVS_OK);
    t_check_exact_f32("parent after writing through a view of a view", got, all, 80);
    /* views beyond the parent */
    kvs_tensor *bad = NULL;
    t_expect(kvs_tensor_view(&bad, p, 8 * 8, 2, vne), KVS_ERR_OUT_OF_RANGE, "view past the end");
    T_ASSERT(bad == NULL, "failed view must set *out = NULL");
    t_expect(kvs_tensor_view(&bad, v, 1, 2, vne), KVS_ERR_OUT_OF_RANGE, "view past the end of a view");
    t_expect(kvs_tensor_view(&bad, p, -1, 2, vne), KVS_ERR_OUT_OF_RANGE, "negative view offset");
    /* the view keeps the memory alive after the parent is destroyed */
    kvs_tensor_destroy(&p);
    T_ASSERT(p == NULL, "destroy sets the pointer to NULL");
    ck_assert(kvs_tensor_download(v, got, 0, 24 * 4) == KVS_OK);
    t_check_exact_f32("view after parent destroyed", got, all + 16, 24);
    kvs_tensor_destroy(&vv);
    kvs_tensor_destroy(&v);
    T_ASSERT(kvs_device_bytes_allocated(dev) == bytes0 - 80 * 4, "bytes_allocated %lld after freeing everything",
             (long long)kvs_device_bytes_allocated(dev));
    kvs_tensor_destroy(&v); /* NULL is fine */
    t_end();
}
END_TEST

START_TEST(test_fill) {
    t_begin("tensor_fill");
    t_case("fill f32 and i32 (views: the guard bands must stay untouched)");
    tt *f = t_new2(KVS_F32, 13, 3), *i = t_new1(KVS_I32, 33), *h = t_new1(KVS_F16, 8);
    float fv[39], fw[39];
    int32_t iv[33], iw[33];
    t_expect(kvs_tensor_fill(f->t, -2.5), KVS_OK, "fill f32");
    t_expect(kvs_tensor_fill(i->t, -7), KVS_OK, "fill i32");
    for (int k = 0; k < 39; k++) fw[k] = -2.5f;
    for (int k = 0; k < 33; k++) iw[k] = -7;
    t_download(f, fv);
    t_download(i, iv);
    t_check_exact_f32("f32 fill", fv, fw, 39);
    t_check_exact_i32("i32 fill", iv, iw, 33);
    t_expect(kvs_tensor_fill(h->t, 1.0), KVS_ERR_DTYPE, "fill f16");
    t_expect(kvs_tensor_fill(i->t, 1e12), KVS_ERR_OUT_OF_RANGE, "fill i32 with 1e12");
    t_end();
}
END_TEST

/* Ops on views whose element offsets are 1, 3, 5: add, copy f32 -> f16 / bf16, gather of f16 rows. */
START_TEST(test_unaligned_views) {
    kvs_device *dev = t_begin("tensor_unaligned_views");
    const int64_t n = 37;
    int64_t pne = 64;
    kvs_tensor *pa = t_plain(KVS_F32, 1, &pne), *pb = t_plain(KVS_F32, 1, &pne), *py = t_plain(KVS_F32, 1, &pne);
    kvs_tensor *ph = t_plain(KVS_F16, 1, &pne), *pbf = t_plain(KVS_BF16, 1, &pne);
    float a[64], b[64], y0[64], y[64];
    t_fill_normal(a, 64, 1);
    t_fill_normal(b, 64, 1);
    t_fill_normal(y0, 64, 1);
    ck_assert(kvs_tensor_upload(pa, a, 0, sizeof a) == KVS_OK);
    ck_assert(kvs_tensor_upload(pb, b, 0, sizeof b) == KVS_OK);
    ck_assert(kvs_tensor_upload(py, y0, 0, sizeof y0) == KVS_OK);
    kvs_tensor *va = NULL, *vb = NULL, *vy = NULL;
    ck_assert(kvs_tensor_view(&va, pa, 1, 1, &n) == KVS_OK);
    ck_assert(kvs_tensor_view(&vb, pb, 3, 1, &n) == KVS_OK);
    ck_assert(kvs_tensor_view(&vy, py, 5, 1, &n) == KVS_OK);
    t_case("add on views at element offsets a+1 b+3 y+5 n=%lld", (long long)n);
    if (!t_op(kvs_add(dev, va, vb, vy))) {
        ck_assert(kvs_tensor_download(py, y, 0, sizeof y) == KVS_OK);
        float want[64];
        memcpy(want, y0, sizeof want);
        for (int i = 0; i < n; i++) want[5 + i] = a[1 + i] + b[3 + i];
        t_check_exact_f32("parent of y", y, want, 64);
    }
    static const kvs_dtype dts[2] = {KVS_F16, KVS_BF16};
    for (int d = 0; d < 2; d++) {
        kvs_tensor *ph_ = d ? pbf : ph, *vh = NULL;
        uint16_t h0[64], h[64];
        for (int i = 0; i < 64; i++) h0[i] = (uint16_t)(0x3c00 + i);
        ck_assert(kvs_tensor_upload(ph_, h0, 0, sizeof h0) == KVS_OK);
        ck_assert(kvs_tensor_view(&vh, ph_, 3, 1, &n) == KVS_OK);
        t_case("copy f32 view a+1 -> %s view +3 n=%lld (byte offset 6)", kvs_dtype_name(dts[d]), (long long)n);
        int skip = t_op(kvs_copy(dev, va, vh));
        kvs_tensor_destroy(&vh);
        if (skip) continue;
        ck_assert(kvs_tensor_download(ph_, h, 0, sizeof h) == KVS_OK);
        for (int i = 0; i < 64; i++) {
            uint16_t want = (i >= 3 && i < 3 + n) ? (d ? ref_bf16_bits(a[1 + i - 3]) : ref_f16_bits(a[1 + i - 3])) : h0[i];
            T_ASSERT(h[i] == want, "element %d: got 0x%04x want 0x%04x", i, h[i], want);
        }
    }
    /* gather of 3-element f16 rows (6 bytes) from a view at element offset 1 into one at offset 5 */
    {
        t_case("gather f16 rows of 3 from view +1 into view +5");
        uint16_t h0[64], h[64];
        for (int i = 0; i < 64; i++) h0[i] = (uint16_t)(0x4000 + i);
        ck_assert(kvs_tensor_upload(ph, h0, 0, sizeof h0) == KVS_OK);
        int64_t sne[2] = {3, 6}, dne[2] = {3, 4};
        kvs_tensor *vs = NULL, *vd = NULL;
        ck_assert(kvs_tensor_view(&vs, ph, 1, 2, sne) == KVS_OK);  /* elements 1..18 */
        ck_assert(kvs_tensor_view(&vd, ph, 41, 2, dne) == KVS_OK); /* elements 41..52 */
        tt *it = t_new1(KVS_I32, 4);
        int32_t idx[4] = {5, 0, 2, 2};
        t_upload_i32(it, idx);
        int skip = t_op(kvs_gather(dev, vs, it->t, vd));
        kvs_tensor_destroy(&vs);
        kvs_tensor_destroy(&vd);
        if (!skip) {
            ck_assert(kvs_tensor_download(ph, h, 0, sizeof h) == KVS_OK);
            uint16_t want[64];
            memcpy(want, h0, sizeof want);
            for (int i = 0; i < 4; i++)
                for (int e = 0; e < 3; e++) want[41 + 3 * i + e] = h0[1 + 3 * idx[i] + e];
            for (int i = 0; i < 64; i++) T_ASSERT(h[i] == want[i], "element %d: got 0x%04x want 0x%04x", i, h[i], want[i]);
        }
    }
    kvs_tensor_destroy(&va);
    kvs_tensor_destroy(&vb);
    kvs_tensor_destroy(&vy);
    t_end();
}
END_TEST

START_TEST(test_sync_and_info) {
    kvs_device *dev = t_begin("tensor_sync_info");
    t_case("device sync, info and caps");
    t_expect(kvs_device_sync(dev), KVS_OK, "sync");
    const kvs_device_info *info = kvs_device_get_info(dev);
    ck_assert(info != NULL);
    T_ASSERT(info->backend == t_backend(), "info.backend %d", (int)info->backend);
    T_ASSERT(info->name[0] != '\0', "device name is empty");
    T_ASSERT(kvs_device_backend(dev) == t_backend(), "kvs_device_backend");
    const kvs_caps *caps = kvs_device_caps(dev);
    ck_assert(caps != NULL);
    T_ASSERT(caps->max_buffer_bytes > 0, "caps.max_buffer_bytes = %lld", (long long)caps->max_buffer_bytes);
    t_end();
}
END_TEST

Suite *suite_tensor(void) {
    Suite *s = suite_create("tensor");
    TCase *tc = tcase_create("tensor");
    tcase_add_test(tc, test_upload_download);
    tcase_add_test(tc, test_views);
    tcase_add_test(tc, test_fill);
    tcase_add_test(tc, test_unaligned_views);
    tcase_add_test(tc, test_sync_and_info);
    suite_add_tcase(s, tc);
    return s;
}
