/* Backend registry front-end and device lifetime. */
#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "internal.h"

static const char *const kvs_backend_names[KVS_BACKEND_COUNT] = {"cpu", "opencl", "vulkan"};

const char *kvs_backend_name(kvs_backend b) {
    return (b >= 0 && b < KVS_BACKEND_COUNT) ? kvs_backend_names[b] : "unknown";
}

kvs_status kvs_backend_from_name(const char *name, kvs_backend *out) {
    if (!name || !out) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_backend_from_name: NULL argument");
    for (int b = 0; b < KVS_BACKEND_COUNT; b++) {
        if (strcasecmp(name, kvs_backend_names[b]) == 0) {
            *out = (kvs_backend)b;
            return KVS_OK;
        }
    }
    return kvs_error(KVS_ERR_INVALID_ARGUMENT, "unknown backend '%s' (expected cpu, opencl or vulkan)", name);
}

int kvs_backend_built(kvs_backend b) { return kvs_backend_lookup(b) != NULL; }

static kvs_status kvs_backend_get(kvs_backend b, const kvs_backend_ops **ops) {
    if (b < 0 || b >= KVS_BACKEND_COUNT)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "backend id %d out of range", (int)b);
    *ops = kvs_backend_lookup(b);
    if (!*ops)
        return kvs_error(KVS_ERR_BACKEND_NOT_BUILT,
                         "backend '%s' is not compiled into this build of kvsieve "
                         "(configure with -D%s=enabled and its development packages installed)",
                         kvs_backend_name(b), kvs_backend_name(b));
    return KVS_OK;
}

kvs_status kvs_device_count(kvs_backend b, int *count) {
    if (!count) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_device_count: count is NULL");
    *count = 0;
    const kvs_backend_ops *ops;
    KVS_TRY(kvs_backend_get(b, &ops));
    return ops->device_count(count);
}

kvs_status kvs_device_describe(kvs_backend b, int index, kvs_device_info *info) {
    if (!info) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_device_describe: info is NULL");
    const kvs_backend_ops *ops;
    KVS_TRY(kvs_backend_get(b, &ops));
    int n = 0;
    KVS_TRY(ops->device_count(&n));
    if (index < 0 || index >= n)
        return kvs_error(KVS_ERR_NO_DEVICE, "%s device %d does not exist (%d found)",
                         kvs_backend_name(b), index, n);
    memset(info, 0, sizeof *info);
    info->backend = b;
    info->index = index;
    return ops->device_describe(index, info);
}

kvs_device_params kvs_device_params_default(void) {
    kvs_device_params p = {.backend = KVS_BACKEND_CPU, .index = 0, .n_threads = 0, .validation = -1};
    return p;
}

kvs_status kvs_device_params_parse(const char *spec, kvs_device_params *p) {
    if (!spec || !p) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_device_params_parse: NULL argument");
    char name[32];
    const char *colon = strchr(spec, ':');
    size_t len = colon ? (size_t)(colon - spec) : strlen(spec);
    if (len == 0 || len >= sizeof name)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "bad device spec '%s' (expected BACKEND[:INDEX])", spec);
    memcpy(name, spec, len);
    name[len] = '\0';
    kvs_backend b;
    KVS_TRY(kvs_backend_from_name(name, &b));
    int index = 0;
    if (colon) {
        char *end = NULL;
        long v = strtol(colon + 1, &end, 10);
        if (end == colon + 1 || *end != '\0' || v < 0 || v > 1000000)
            return kvs_error(KVS_ERR_INVALID_ARGUMENT, "bad device index in '%s'", spec);
        index = (int)v;
    }
    p->backend = b;
    p->index = index;
    return KVS_OK;
}

/* ---- the op list ------------------------------------------------------------------------- */

#define KVS_OP_NAME_(ctx, name, args) #name,
static const char *const kvs_op_names[KVS_OP_COUNT] = {KVS_OP_LIST(KVS_OP_NAME_, ~)};

const char *kvs_op_name(kvs_op_id op) { return (op >= 0 && op < KVS_OP_COUNT) ? kvs_op_names[op] : NULL; }

int kvs_op_from_name(const char *name, size_t len) {
    for (int i = 0; name && i < KVS_OP_COUNT; i++)
        if (strlen(kvs_op_names[i]) == len && strncmp(name, kvs_op_names[i], len) == 0) return i;
    return -1;
}

kvs_status kvs_backend_check(const kvs_backend_ops *ops) {
    const char *missing = NULL;
#define KVS_REQUIRE_(slot)                                                                         \
    if (!missing && !ops->slot) missing = #slot;
    KVS_REQUIRE_(name) KVS_REQUIRE_(device_count) KVS_REQUIRE_(device_describe) KVS_REQUIRE_(device_open)
    KVS_REQUIRE_(device_close) KVS_REQUIRE_(device_sync) KVS_REQUIRE_(buffer_alloc) KVS_REQUIRE_(buffer_free)
    KVS_REQUIRE_(upload) KVS_REQUIRE_(download) KVS_REQUIRE_(fill32)
#define KVS_REQUIRE_OP_(ctx, name, args) KVS_REQUIRE_(name)
    KVS_OP_LIST(KVS_REQUIRE_OP_, ~)
#undef KVS_REQUIRE_OP_
#undef KVS_REQUIRE_
    if (!missing && ops->n_variants > 0 && !ops->variants) missing = "variants";
    if (missing)
        return kvs_error(KVS_ERR_INTERNAL, "backend '%s': required ops-table slot '%s' is NULL",
                         ops->name ? ops->name : "?", missing);
    return KVS_OK;
}

static kvs_status variants_apply(kvs_device *dev, const char *spec, bool skip_foreign);

kvs_status kvs_device_open(kvs_device **out, const kvs_device_params *p) {
    if (!out) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_device_open: out is NULL");
    *out = NULL;
    kvs_device_params params = p ? *p : kvs_device_params_default();
    if (params.n_threads < 0 || params.n_threads > KVS_MAX_THREADS)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "n_threads must be in [0, %d] (got %d)", KVS_MAX_THREADS,
                         params.n_threads);
    const kvs_backend_ops *ops;
    KVS_TRY(kvs_backend_get(params.backend, &ops));
    KVS_TRY(kvs_backend_check(ops));
    int n = 0;
    KVS_TRY(ops->device_count(&n));
    if (params.index < 0 || params.index >= n)
        return kvs_error(KVS_ERR_NO_DEVICE, "%s device %d does not exist (%d found)",
                         kvs_backend_name(params.backend), params.index, n);
    kvs_device *dev = calloc(1, sizeof *dev);
    if (!dev) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_device_open: out of host memory");
    dev->ops = ops;
    dev->info.backend = params.backend;
    dev->info.index = params.index;
    kvs_status s = ops->device_open(dev, &params);
    if (s != KVS_OK) {
        free(dev);
        return s;
    }
    const char *env = getenv("KVS_VARIANT");
    /* one KVS_VARIANT serves every backend: each device applies the entries its backend knows */
    if (env && env[0] && (s = variants_apply(dev, env, true)) != KVS_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", kvs_last_error());
        kvs_device_destroy(&dev);
        return kvs_error(s, "KVS_VARIANT: %s", msg);
    }
    *out = dev;
    return KVS_OK;
}

void kvs_device_destroy(kvs_device **dev) {
    if (!dev || !*dev) return;
    (*dev)->ops->device_close(*dev);
    kvs_profile_free(*dev);
    free(*dev);
    *dev = NULL;
}

const kvs_caps *kvs_device_caps(const kvs_device *dev) { return dev ? &dev->caps : NULL; }
const kvs_device_info *kvs_device_get_info(const kvs_device *dev) { return dev ? &dev->info : NULL; }
kvs_backend kvs_device_backend(const kvs_device *dev) { return dev ? dev->info.backend : KVS_BACKEND_COUNT; }
int64_t kvs_device_bytes_allocated(const kvs_device *dev) { return dev ? dev->bytes_allocated : 0; }
int64_t kvs_device_bytes_peak(const kvs_device *dev) { return dev ? dev->bytes_peak : 0; }
void kvs_device_reset_peak(kvs_device *dev) {
    if (dev) dev->bytes_peak = dev->bytes_allocated;
}

double kvs_device_build_seconds(const kvs_device *dev) { return dev ? dev->build_seconds : 0.0; }

kvs_status kvs_device_set_threads(kvs_device *dev, int n_threads) {
    if (!dev) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_device_set_threads: dev is NULL");
    if (n_threads < 1 || n_threads > KVS_MAX_THREADS)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "n_threads must be in [1, %d] (got %d)", KVS_MAX_THREADS, n_threads);
    if (!dev->ops->set_threads)
        return kvs_error(KVS_ERR_UNSUPPORTED, "%s backend has no thread count setting", dev->ops->name);
    return dev->ops->set_threads(dev, n_threads);
}

kvs_status kvs_device_sync(kvs_device *dev) {
    if (!dev) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_device_sync: dev is NULL");
    if (!dev->prof) return dev->ops->device_sync(dev);
    double t0 = kvs_profile_begin(dev);
    kvs_status s = dev->ops->device_sync(dev);
    kvs_profile_end(dev, KVS_PROF_SYNC, t0, 0);
    return s;
}

kvs_status kvs_device_set_query(kvs_device *dev, int on) {
    if (!dev) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_device_set_query: dev is NULL");
    dev->query = on != 0;
    return KVS_OK;
}

/* ---- kernel variants ---------------------------------------------------------------------- */

static int variant_op(const kvs_device *dev, const char *op) {
    return dev && op ? kvs_op_from_name(op, strlen(op)) : -1;
}

int kvs_device_variant_count(const kvs_device *dev, const char *op) {
    int id = variant_op(dev, op), n = 0;
    for (int i = 0; id >= 0 && i < dev->ops->n_variants; i++) n += dev->ops->variants[i].op == (kvs_op_id)id;
    return n;
}

const char *kvs_device_variant_name(const kvs_device *dev, const char *op, int i) {
    int id = variant_op(dev, op);
    for (int v = 0; id >= 0 && v < dev->ops->n_variants; v++)
        if (dev->ops->variants[v].op == (kvs_op_id)id && i-- == 0) return dev->ops->variants[v].name;
    return NULL;
}

/* 1 when a backend compiled into this build other than dev's lists variant vn (vl bytes) of op. */
static bool variant_known_elsewhere(const kvs_device *dev, int op, const char *vn, size_t vl) {
    for (int b = 0; b < KVS_BACKEND_COUNT; b++) {
        const kvs_backend_ops *o = kvs_backend_lookup((kvs_backend)b);
        if (!o || o == dev->ops) continue;
        for (int i = 0; i < o->n_variants; i++)
            if (o->variants[i].op == (kvs_op_id)op && strlen(o->variants[i].name) == vl &&
                strncmp(o->variants[i].name, vn, vl) == 0)
                return true;
    }
    return false;
}

/* Forces one "op:variant" entry (len bytes of e); seen[op] marks the ops named earlier in the same
 * spec (an op named twice is a typo or a conflict, never "the last one wins"). skip_foreign (the
 * KVS_VARIANT list, which names the variants of every backend at once): an entry dev's backend does
 * not know but another built backend does is skipped, not an error. */
static kvs_status variant_force(kvs_device *dev, const char *e, size_t len, bool seen[KVS_OP_COUNT],
                                bool skip_foreign) {
    const char *colon = memchr(e, ':', len);
    if (!colon || colon == e || colon + 1 == e + len)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "variant spec entry '%.*s' is not OP:VARIANT", (int)len, e);
    int op = kvs_op_from_name(e, (size_t)(colon - e));
    if (op < 0) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "variant spec: unknown op '%.*s'", (int)(colon - e), e);
    if (seen[op])
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "variant spec: op '%s' is named twice (entry '%.*s')",
                         kvs_op_name((kvs_op_id)op), (int)len, e);
    seen[op] = true;
    const char *vn = colon + 1;
    size_t vl = (size_t)(e + len - vn);
    if (vl == 4 && strncmp(vn, "auto", 4) == 0) {
        dev->forced[op] = NULL;
        return KVS_OK;
    }
    char names[256] = "auto";
    for (int i = 0; i < dev->ops->n_variants; i++) {
        const kvs_variant *v = &dev->ops->variants[i];
        if (v->op != (kvs_op_id)op) continue;
        if (strlen(v->name) == vl && strncmp(v->name, vn, vl) == 0) {
            char why[256] = "";
            if (v->usable && !v->usable(dev, why, sizeof why))
                return kvs_error(KVS_ERR_UNSUPPORTED, "variant %s:%s cannot run on %s device '%s': %s",
                                 kvs_op_name((kvs_op_id)op), v->name, dev->ops->name, dev->info.name, why);
            dev->forced[op] = v;
            return KVS_OK;
        }
        size_t used = strlen(names);
        snprintf(names + used, sizeof names - used, ", %s", v->name);
    }
    if (skip_foreign && variant_known_elsewhere(dev, op, vn, vl)) return KVS_OK;
    return kvs_error(KVS_ERR_INVALID_ARGUMENT, "variant spec: op '%s' has no variant '%.*s' on the %s backend (%s)",
                     kvs_op_name((kvs_op_id)op), (int)vl, vn, dev->ops->name, names);
}

/* kvs_device_set_variants; skip_foreign: see variant_force. */
static kvs_status variants_apply(kvs_device *dev, const char *spec, bool skip_foreign) {
    if (!spec || !spec[0]) {
        for (int i = 0; i < KVS_OP_COUNT; i++) dev->forced[i] = NULL;
        return KVS_OK;
    }
    bool seen[KVS_OP_COUNT] = {false};
    for (const char *e = spec;;) {
        while (*e == ' ') e++;
        size_t len = strcspn(e, ",");
        size_t tl = len;
        while (tl > 0 && e[tl - 1] == ' ') tl--;
        KVS_TRY(variant_force(dev, e, tl, seen, skip_foreign));
        if (!e[len]) break;
        e += len + 1;
    }
    return KVS_OK;
}

kvs_status kvs_device_set_variants(kvs_device *dev, const char *spec) {
    if (!dev) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_device_set_variants: dev is NULL");
    return variants_apply(dev, spec, false);
}
