/* A float64 host DWT along one row (periodization; the layout and boundary rule of kvs_dwt in
 * ops.h): what the schedules use instead of a device (schedules stay device-free), and the
 * float64 reference the op tests compare every backend's kvs_dwt / kvs_idwt with
 * (tests/reference.c). Not installed. */
#ifndef KVS_SCHEDULE_DWT_HOST_H
#define KVS_SCHEDULE_DWT_HOST_H

#include <stdint.h>

#include "kvsieve/ops.h"

/* Orthonormal low-pass taps of w into lo[0..8) (Haar 2, db2 4 in closed form, db4 8 from Daubechies
 * 1992 table 6.1, normalised to sum sqrt(2)); returns the tap count, 0 for an unknown wavelet. */
int kvs_host_wavelet_lo(kvs_wavelet w, double *lo);

/* One row x[n] -> y[kvs_dwt_length(n, levels)], layout [a_J | d_J | ... | d_1]; an odd level
 * length is extended by repeating its last sample. scratch: 2 * (n + 2) doubles.
 * The caller checks n >= 1, 1 <= levels and a known w (kvs_dwt_length(n, levels) >= 0). */
void kvs_host_dwt_row(const double *x, int64_t n, kvs_wavelet w, int levels, double *y, double *scratch);

/* The exact inverse (the transpose of the analysis at every level, then truncation to the level
 * length): y[kvs_dwt_length(n, levels)] -> x[n]. scratch: 2 * (n + 2) doubles. */
void kvs_host_idwt_row(const double *y, int64_t n, kvs_wavelet w, int levels, double *x, double *scratch);

#endif
