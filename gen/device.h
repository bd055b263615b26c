/* gen/device.h: a device's facts as the templates see them (gen_device); a core type of both libraries, no Lua */
#ifndef KF_GEN_DEVICE_H
#define KF_GEN_DEVICE_H

/*
 * The one description of a device that the generator (templates' valid/default/kernels), the
 * runtime (runtime/device.c fills it from the driver's rt_devinfo) and the tuner share. It is part of
 * the core (kf_core: gen/kv.c, gen/kernels.c, gen/device.c), which the runtime-only library links:
 * runtime sources include it, never gen/template.h.
 */
typedef struct gen_device {
    char arch[16];        /* "sm_90a" */
    int cc;               /* 90 */
    int sms;
    int smem_optin;       /* bytes of shared memory a block may opt in to */
    int smem_sm;
    int regs_sm;
    long long l2;
} gen_device;

/* Facts of a known architecture, used when no GPU is present (H200 for sm_90/90a,
 * A100 for sm_80). Returns -1 for an arch kforge does not know. */
int gen_device_for_arch(gen_device *d, const char *arch);

#endif
