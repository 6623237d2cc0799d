/* kvsieve generate — the --stats step breakdown and the --profile tables (per op kind and per
 * layer), as text on stderr or as JSON. */
#ifndef KVS_TOOLS_GEN_REPORT_H
#define KVS_TOOLS_GEN_REPORT_H

#include <json-c/json.h>
#include <stdio.h>

#include "kvsieve/device.h"
#include "kvsieve/generate.h"

/* A profile read from a device after a decode (kvs_device_profile_read). */
typedef struct gen_profile {
    kvs_profile_entry *e;
    int64_t n;
} gen_profile;

/* Reads dev's profile into *p (p->e malloc'ed; empty when the device is not profiling or out of
 * memory). gen_profile_free releases it. */
void gen_profile_capture(kvs_device *dev, gen_profile *p);
void gen_profile_free(gen_profile *p);

/* "per step (ms): plan ..., forward ..., logits ..., confidence ..., commit ..., other ...; total"
 * for the decode of st, prefixed by label. */
void gen_print_breakdown(FILE *f, const char *label, const kvs_gen_stats *st);
/* The same as a JSON object of ms per step {plan, forward, logits, confidence, commit, other, total}. */
json_object *gen_breakdown_json(const kvs_gen_stats *st);

/* Two tables for a decode of `steps` steps over n_layers layers: per op kind (calls and ms per
 * step, share of the profiled time, MB moved per step), then ms per step per kind and place, in the
 * order the forward runs: column "embed" (the token embedding, KVS_PROFILE_EMBED), 0 .. n_layers-1
 * (the layers), "head" (layer -1: the final norm and logits head, and work outside the forward);
 * each kind's row sums to its ms in the first table, the "all" row to the device work. */
void gen_print_profile(FILE *f, const char *label, const gen_profile *p, int64_t steps, int n_layers);
/* The cells as a JSON array of {kind, part, layer, calls, ms, bytes}: part "embed" (the token
 * embedding), "layer" (layer: its index) or "head" (the logits head and work outside the forward);
 * layer is null unless part is "layer". ms and bytes: totals over the decode, not per step. */
json_object *gen_profile_json(const gen_profile *p);

/* bytes as text a reader can see: "%.2f MiB" from 0.1 MiB (104858 bytes) up, "%.2f KiB" from 1 KiB,
 * else "N bytes" (a tiny model's cache printed as "0.00 MiB"). Writes buf (cap bytes), returns it. */
const char *gen_bytes_str(char *buf, size_t cap, int64_t bytes);

/* A JSON string of decoded text s (NUL-terminated bytes): valid UTF-8 sequences are kept, every
 * other byte (a byte token cut mid-character, as random or small models emit) becomes U+FFFD, so
 * the JSON stays valid UTF-8 (RFC 8259 sec. 8.1). NULL s gives "". */
json_object *gen_json_text(const char *s);

#endif
