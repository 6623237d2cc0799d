/* kvsieve devices [--json]: every backend (built or not), its devices and their capabilities. */
#include <json-c/json.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "cmds.h"

static const char *device_type_name(kvs_device_type t) {
    switch (t) {
    case KVS_DEVICE_CPU: return "cpu";
    case KVS_DEVICE_GPU_DISCRETE: return "discrete-gpu";
    case KVS_DEVICE_GPU_INTEGRATED: return "integrated-gpu";
    case KVS_DEVICE_OTHER: return "other";
    }
    return "other";
}

/* "23.4 GiB", "32 KiB", "-" for 0 (unknown/unsupported). */
static const char *fmt_bytes(char *buf, size_t n, int64_t b) {
    if (b <= 0) snprintf(buf, n, "-");
    else if (b >= ((int64_t)1 << 50)) snprintf(buf, n, "unlimited");
    else if (b >= ((int64_t)1 << 30)) snprintf(buf, n, "%.1f GiB", (double)b / (double)((int64_t)1 << 30));
    else if (b >= ((int64_t)1 << 20)) snprintf(buf, n, "%.0f MiB", (double)b / (double)(1 << 20));
    else if (b >= 1024) snprintf(buf, n, "%.0f KiB", (double)b / 1024.0);
    else snprintf(buf, n, "%lld B", (long long)b);
    return buf;
}

static json_object *caps_json(const kvs_caps *c) {
    json_object *o = json_object_new_object();
    json_object_object_add(o, "total_memory_bytes", json_object_new_int64(c->total_memory_bytes));
    /* null: the device does not report it (Vulkan), never a count of 0 */
    json_object_object_add(o, "compute_units", c->compute_units > 0 ? json_object_new_int(c->compute_units) : NULL);
    json_object_object_add(o, "subgroup_size", json_object_new_int(c->subgroup_size));
    json_object_object_add(o, "subgroup_ops", json_object_new_boolean(c->subgroup_ops));
    json_object_object_add(o, "shared_mem_bytes", json_object_new_int64(c->shared_mem_bytes));
    json_object_object_add(o, "max_workgroup_size", json_object_new_int(c->max_workgroup_size));
    json_object_object_add(o, "max_buffer_bytes", json_object_new_int64(c->max_buffer_bytes));
    json_object_object_add(o, "max_binding_bytes", json_object_new_int64(c->max_binding_bytes));
    json_object_object_add(o, "fp16_storage", json_object_new_boolean(c->fp16_storage));
    json_object_object_add(o, "fp16_arith", json_object_new_boolean(c->fp16_arith));
    json_object_object_add(o, "bf16_storage", json_object_new_boolean(c->bf16_storage));
    json_object_object_add(o, "int8_arith", json_object_new_boolean(c->int8_arith));
    json_object_object_add(o, "unified_memory", json_object_new_boolean(c->unified_memory));
    json_object_object_add(o, "n_threads", json_object_new_int(c->n_threads));
    return o;
}

static void caps_text(const kvs_caps *c) {
    char a[32], b[32], d[32], cu[48];
    if (c->compute_units > 0) snprintf(cu, sizeof cu, "%d compute unit%s", c->compute_units, c->compute_units == 1 ? "" : "s");
    else snprintf(cu, sizeof cu, "compute units not reported");
    printf("      memory %s, %s%s", fmt_bytes(a, sizeof a, c->total_memory_bytes), cu, c->unified_memory ? " (unified)" : "");
    if (c->n_threads) printf(", %d thread%s", c->n_threads, c->n_threads == 1 ? "" : "s");
    printf("\n");
    printf("      subgroup %s%s, shared memory %s, max work-group %d\n",
           c->subgroup_size ? (snprintf(d, sizeof d, "%d", c->subgroup_size), d) : "-",
           c->subgroup_ops ? " (ops)" : "", fmt_bytes(a, sizeof a, c->shared_mem_bytes),
           c->max_workgroup_size);
    printf("      fp16 storage %s, fp16 arith %s, bf16 storage %s, int8 %s\n", c->fp16_storage ? "yes" : "no",
           c->fp16_arith ? "yes" : "no", c->bf16_storage ? "yes" : "no", c->int8_arith ? "yes" : "no");
    printf("      max buffer %s, max binding %s\n", fmt_bytes(a, sizeof a, c->max_buffer_bytes),
           fmt_bytes(b, sizeof b, c->max_binding_bytes));
}

int cmd_devices(int argc, char **argv) {
    int json = 0, no_open = 0;
    const cli_opt opts[] = {
        {"json", 0, CLI_FLAG, &json, NULL, "print one JSON object on stdout"},
        {"no-open", 0, CLI_FLAG, &no_open, NULL, "describe devices without opening them (no capabilities)"},
    };
    const cli_spec spec = {
        .prog = "kvsieve devices",
        .usage = "[--json] [--no-open]",
        .summary = "Lists every backend (compiled in or not) and each device it sees, with the\n"
                   "capabilities kvsieve reads when it opens the device. Use a device with\n"
                   "--backend NAME:INDEX in the other commands.",
        .opts = opts,
        .n_opts = (int)(sizeof opts / sizeof opts[0]),
    };
    int rc = cli_parse(&spec, argc, argv, NULL, NULL);
    if (rc >= 0) return rc;

    json_object *root = json ? json_object_new_object() : NULL;
    json_object *jbackends = json ? json_object_new_array() : NULL;
    if (json) {
        json_object_object_add(root, "kvsieve_version", json_object_new_string(kvs_version()));
        json_object_object_add(root, "backends", jbackends);
    }
    int failures = 0;
    for (int bi = 0; bi < KVS_BACKEND_COUNT; bi++) {
        kvs_backend b = (kvs_backend)bi;
        const char *bname = kvs_backend_name(b);
        json_object *jb = NULL, *jdevs = NULL;
        if (json) {
            jb = json_object_new_object();
            json_object_object_add(jb, "name", json_object_new_string(bname));
            json_object_object_add(jb, "built", json_object_new_boolean(kvs_backend_built(b)));
            json_object_array_add(jbackends, jb);
        }
        if (!kvs_backend_built(b)) {
            if (!json) printf("%s: not built\n", bname);
            continue;
        }
        int count = 0;
        kvs_status s = kvs_device_count(b, &count);
        if (s != KVS_OK) {
            failures++;
            if (json) json_object_object_add(jb, "error", json_object_new_string(kvs_last_error()));
            else printf("%s: error: %s\n", bname, kvs_last_error());
            continue;
        }
        if (json) {
            jdevs = json_object_new_array();
            json_object_object_add(jb, "devices", jdevs);
        } else {
            printf("%s: %d device%s\n", bname, count, count == 1 ? "" : "s");
        }
        for (int i = 0; i < count; i++) {
            kvs_device_info info;
            json_object *jd = json ? json_object_new_object() : NULL;
            if (json) json_object_array_add(jdevs, jd);
            if (kvs_device_describe(b, i, &info) != KVS_OK) {
                failures++;
                if (json) {
                    json_object_object_add(jd, "index", json_object_new_int(i));
                    json_object_object_add(jd, "error", json_object_new_string(kvs_last_error()));
                } else {
                    printf("  %s:%d  error: %s\n", bname, i, kvs_last_error());
                }
                continue;
            }
            if (json) {
                json_object_object_add(jd, "index", json_object_new_int(i));
                char specbuf[48];
                snprintf(specbuf, sizeof specbuf, "%s:%d", bname, i);
                json_object_object_add(jd, "spec", json_object_new_string(specbuf));
                json_object_object_add(jd, "name", json_object_new_string(info.name));
                json_object_object_add(jd, "type", json_object_new_string(device_type_name(info.type)));
                json_object_object_add(jd, "vendor", json_object_new_string(info.vendor));
                json_object_object_add(jd, "driver", json_object_new_string(info.driver));
            } else {
                printf("  %s:%d  %s\n", bname, i, info.name);
                printf("      type %s, vendor %s\n", device_type_name(info.type), info.vendor);
                printf("      driver %s\n", info.driver);
            }
            if (no_open) continue;
            kvs_device_params p = kvs_device_params_default();
            p.backend = b;
            p.index = i;
            kvs_device *dev = NULL;
            s = kvs_device_open(&dev, &p);
            if (s != KVS_OK) {
                failures++;
                if (json) json_object_object_add(jd, "error", json_object_new_string(kvs_last_error()));
                else printf("      cannot open: %s\n", kvs_last_error());
                continue;
            }
            if (json) json_object_object_add(jd, "caps", caps_json(kvs_device_caps(dev)));
            else caps_text(kvs_device_caps(dev));
            kvs_device_destroy(&dev);
        }
    }
    if (json) {
        printf("%s\n", json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED |
                                                                JSON_C_TO_STRING_NOSLASHESCAPE));
        json_object_put(root);
    }
    return failures ? CLI_EXIT_FAIL : CLI_EXIT_OK;
}
