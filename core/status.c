/* Status codes, thread-local error messages, version. */
#include <stdio.h>
#include <string.h>

#include "internal.h"

static _Thread_local char kvs_err_msg[1024];

const char *kvs_status_str(kvs_status s) {
    switch (s) {
#define KVS_X_STR(name, value, desc) case name: return desc;
        KVS_STATUS_LIST(KVS_X_STR)
#undef KVS_X_STR
    }
    return "unknown status";
}

const char *kvs_status_name(kvs_status s) {
    switch (s) {
#define KVS_X_NAME(name, value, desc) case name: return #name;
        KVS_STATUS_LIST(KVS_X_NAME)
#undef KVS_X_NAME
    }
    return "KVS_UNKNOWN";
}

const char *kvs_last_error(void) { return kvs_err_msg; }

void kvs_clear_error(void) { kvs_err_msg[0] = '\0'; }

kvs_status kvs_verror(kvs_status s, const char *fmt, va_list ap) {
    vsnprintf(kvs_err_msg, sizeof kvs_err_msg, fmt, ap);
    return s;
}

kvs_status kvs_error(kvs_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    kvs_verror(s, fmt, ap);
    va_end(ap);
    return s;
}

const char *kvs_version(void) {
#define KVS_STR2(x) #x
#define KVS_STR(x) KVS_STR2(x)
    return KVS_STR(KVS_VERSION_MAJOR) "." KVS_STR(KVS_VERSION_MINOR) "." KVS_STR(KVS_VERSION_PATCH);
}

unsigned kvs_version_number(void) { return KVS_VERSION_NUMBER; }
