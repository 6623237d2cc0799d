/* Backend probing for test mains. OpenCL (PoCL) and Vulkan drivers may start threads or take locks
 * when first queried; a Check child forked after that can deadlock. So the device count is read in a
 * throw-away child process and the parent never touches the driver. */
#ifndef KVS_TESTS_PROBE_H
#define KVS_TESTS_PROBE_H

#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvsieve/kvsieve.h"

/* 1 if backend p->backend has a device p->index, else 0. */
static inline int kvs_test_backend_present(const kvs_device_params *p) {
    pid_t pid = fork();
    if (pid == 0) {
        int n = 0;
        _exit(kvs_device_count(p->backend, &n) == KVS_OK && n > p->index ? 0 : 1);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid) return 0;
    return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

#endif
