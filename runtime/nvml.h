/* runtime/nvml.h: the GPU's SM clock, board power and temperature through NVML, loaded with dlopen (absent: unknown, never an error) */
#ifndef KF_RUNTIME_NVML_H
#define KF_RUNTIME_NVML_H

/*
 * NVML (libnvidia-ml.so.1, shipped with the driver) is opened on first use, like the driver
 * API (runtime/cuda.c). Where it is missing, or does not know the device, every figure is
 * unknown (NaN) and nothing fails: clocks and power are recorded beside a measurement, they
 * never decide whether one is taken. $KFORGE_NVML_LIB names another library file (tests:
 * a path that does not exist stands for a machine without NVML). Thread-safe.
 */

typedef struct rt_nvml_dev rt_nvml_dev;

/* One reading; NaN where NVML did not give the figure. */
typedef struct rt_nvml_reading {
    double sm_mhz;      /* current SM clock */
    double power_w;     /* board power draw */
    double temp_c;      /* GPU die temperature */
} rt_nvml_reading;

/* The NVML device of the CUDA device with this UUID ("GPU-xxxxxxxx-..."), or NULL when NVML
 * or the device is not there (why: a static line, see rt_nvml_why). Never fails otherwise. */
rt_nvml_dev *rt_nvml_open(const char *uuid);
void rt_nvml_close(rt_nvml_dev *d);     /* NULL: no-op */
/* Why the last rt_nvml_open gave NULL ("libnvidia-ml.so.1: cannot open ..."), or "". */
const char *rt_nvml_why(void);
/* Reads the figures now (d NULL: every one NaN). About 0.1 ms. */
void rt_nvml_read(rt_nvml_dev *d, rt_nvml_reading *r);

#endif
