/* File mapping, string hash and dtype conversion shared by the model-file readers. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "format/format.h"
#include "quant/quant.h"

kvs_status kvs_map_file(const char *path, void **map, void **heap, size_t *size) {
    *map = NULL;
    *heap = NULL;
    *size = 0;
    /* O_NONBLOCK: a FIFO without a writer must not hang the open (no effect on regular files) */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return kvs_error(KVS_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return kvs_error(KVS_ERR_IO, "cannot stat '%s': %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return kvs_error(KVS_ERR_IO, "'%s' is not a regular file", path);
    }
    size_t n = (size_t)st.st_size;
    *size = n;
    if (n == 0) {
        close(fd);
        return KVS_OK;
    }
    const char *no_mmap = getenv("KVSIEVE_NO_MMAP");   /* tests exercise the read() fallback */
    void *p = (no_mmap && no_mmap[0] == '1') ? MAP_FAILED
                                             : mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p != MAP_FAILED) {
        close(fd);
        *map = p;
        return KVS_OK;
    }
    /* fallback: read the whole file */
    char *buf = malloc(n);
    if (!buf) {
        close(fd);
        return kvs_error(KVS_ERR_OUT_OF_MEMORY, "cannot allocate %zu bytes for '%s'", n, path);
    }
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            int e = r < 0 ? errno : EIO;
            free(buf);
            close(fd);
            return kvs_error(KVS_ERR_IO, "cannot read '%s' at byte %zu: %s", path, got, strerror(e));
        }
        got += (size_t)r;
    }
    close(fd);
    *heap = buf;
    return KVS_OK;
}

void kvs_unmap_file(void *map, void *heap, size_t size) {
    if (map) munmap(map, size);
    free(heap);
}

/* ---- hash ---- */

static uint64_t fnv1a(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ull;
    }
    return h;
}

int kvs_strhash_init(kvs_strhash *h, size_t n) {
    size_t cap = 16;
    while (cap < 2 * n + 2) cap *= 2;
    h->keys = calloc(cap, sizeof *h->keys);
    h->vals = calloc(cap, sizeof *h->vals);
    h->cap = cap;
    h->count = 0;
    if (!h->keys || !h->vals) {
        kvs_strhash_free(h);
        return -1;
    }
    return 0;
}

void kvs_strhash_free(kvs_strhash *h) {
    free(h->keys);
    free(h->vals);
    h->keys = NULL;
    h->vals = NULL;
    h->cap = 0;
    h->count = 0;
}

int64_t kvs_strhash_find_n(const kvs_strhash *h, const char *key, size_t len) {
    if (!h->cap) return -1;
    size_t m = h->cap - 1;
    for (size_t i = (size_t)fnv1a(key, len) & m;; i = (i + 1) & m) {
        const char *k = h->keys[i];
        if (!k) return -1;
        if (strnlen(k, len + 1) == len && memcmp(k, key, len) == 0) return h->vals[i];
    }
}

int64_t kvs_strhash_find(const kvs_strhash *h, const char *key) {
    return kvs_strhash_find_n(h, key, strlen(key));
}

static void put_nogrow(kvs_strhash *h, const char *key, int64_t val) {
    size_t m = h->cap - 1;
    for (size_t i = (size_t)fnv1a(key, strlen(key)) & m;; i = (i + 1) & m) {
        if (!h->keys[i]) {
            h->keys[i] = key;
            h->vals[i] = val;
            h->count++;
            return;
        }
        if (strcmp(h->keys[i], key) == 0) {
            h->vals[i] = val;
            return;
        }
    }
}

int kvs_strhash_put(kvs_strhash *h, const char *key, int64_t val) {
    if (2 * (h->count + 1) > h->cap) {
        kvs_strhash big;
        if (kvs_strhash_init(&big, h->cap) != 0) return -1;   /* twice the capacity */
        for (size_t i = 0; i < h->cap; i++)
            if (h->keys[i]) put_nogrow(&big, h->keys[i], h->vals[i]);
        kvs_strhash_free(h);
        *h = big;
    }
    put_nogrow(h, key, val);
    return 0;
}

/* ---- conversion ---- */

kvs_status kvs_convert_to_f32(kvs_dtype dt, const void *src, int64_t n, float *dst) {
    const uint8_t *p = src;
    switch (dt) {
    case KVS_F32:
        memcpy(dst, src, (size_t)n * 4);
        return KVS_OK;
    case KVS_F16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            dst[i] = kvs_f16_to_f32(h);
        }
        return KVS_OK;
    case KVS_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            uint32_t u = (uint32_t)h << 16;
            memcpy(&dst[i], &u, 4);
        }
        return KVS_OK;
    default:
        if (kvs_dtype_is_quant(dt)) return kvs_dequant_row(dt, src, n, dst);
        return kvs_error(KVS_ERR_DTYPE, "cannot convert dtype %s to f32", kvs_dtype_name(dt));
    }
}

int kvs_path_is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

int kvs_path_is_file(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}
