/* Per-op, per-layer timing of a device's work (kvs_device_profile in device.h): the op front-ends
 * (core/ops.c), the transfers (core/tensor.c) and kvs_device_sync add their wall time to a table
 * [kind][layer slot]; kvs_model_forward tags the layer. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

/* slot 0: the token embedding (KVS_PROFILE_EMBED); slot 1: outside any layer (the logits head,
 * other callers' work); slot l + 2: layer l */
#define PROF_SLOTS (KVS_PROFILE_MAX_LAYERS + 2)

typedef struct prof_cell {
    int64_t calls, bytes;
    double seconds;
} prof_cell;

typedef struct kvs_profiler {
    int slot;                              /* current layer slot (PROF_SLOTS) */
    prof_cell cells[KVS_PROF_KINDS][PROF_SLOTS];
} kvs_profiler;

double kvs_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Asynchronous backends queue work: the profiler waits for the queue around each timed piece. */
static void prof_wait(kvs_device *dev) {
    if (dev->info.backend != KVS_BACKEND_CPU) (void)dev->ops->device_sync(dev);
}

double kvs_profile_begin(kvs_device *dev) {
    prof_wait(dev);
    return kvs_now_s();
}

void kvs_profile_end(kvs_device *dev, int kind, double t0, int64_t bytes) {
    prof_wait(dev);
    double t = kvs_now_s() - t0;
    kvs_profiler *p = dev->prof;
    if (!p || kind < 0 || kind >= KVS_PROF_KINDS) return;
    prof_cell *c = &p->cells[kind][p->slot];
    c->calls++;
    c->bytes += bytes;
    c->seconds += t;
}

void kvs_profile_free(kvs_device *dev) {
    free(dev->prof);
    dev->prof = NULL;
}

kvs_status kvs_device_profile(kvs_device *dev, int on) {
    if (!dev) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_device_profile: dev is NULL");
    if (on != 0 && on != 1) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_device_profile: on = %d (want 0 or 1)", on);
    if (!on) {
        kvs_profile_free(dev);
        return KVS_OK;
    }
    if (!dev->prof) {
        dev->prof = calloc(1, sizeof *dev->prof);
        if (!dev->prof) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_device_profile: out of host memory");
    } else {
        memset(dev->prof, 0, sizeof *dev->prof);
    }
    prof_wait(dev); /* work queued before the start is not counted */
    return KVS_OK;
}

int kvs_device_profiling(const kvs_device *dev) { return dev && dev->prof; }

void kvs_device_profile_layer(kvs_device *dev, int layer) {
    if (!dev || !dev->prof) return;
    dev->prof->slot = layer == KVS_PROFILE_EMBED ? 0
                      : layer < 0                ? 1
                                                 : (layer < KVS_PROFILE_MAX_LAYERS ? layer : KVS_PROFILE_MAX_LAYERS - 1) + 2;
}

static const char *prof_kind_name(int k) {
    static const char *const extra[] = {"upload", "download", "fill", "sync"};
    return k < KVS_OP_COUNT ? kvs_op_name((kvs_op_id)k) : extra[k - KVS_OP_COUNT];
}

int64_t kvs_device_profile_read(const kvs_device *dev, kvs_profile_entry *out, int64_t max) {
    if (!dev || !dev->prof) return 0;
    int64_t n = 0;
    for (int k = 0; k < KVS_PROF_KINDS; k++)
        for (int sl = 0; sl < PROF_SLOTS; sl++) {
            const prof_cell *c = &dev->prof->cells[k][sl];
            if (!c->calls) continue;
            if (out && n < max)
                out[n] = (kvs_profile_entry){.kind = prof_kind_name(k), .layer = sl - 2, .calls = c->calls,
                                             .seconds = c->seconds, .bytes = c->bytes};
            n++;
        }
    return n;
}
