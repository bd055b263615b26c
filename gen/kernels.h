/* gen/kernels.h: the kernels of a variant (name, threads, dynamic shared memory) and their stored text form */
#ifndef KF_GEN_KERNELS_H
#define KF_GEN_KERNELS_H

#include <stddef.h>

typedef struct gen_kernel {
    char name[64];
    int threads;
    int smem;             /* dynamic shared memory, bytes */
    int pdl;              /* 1: launched with programmatic dependent launch (kernels()' pdl = 1, kept on sm_90+ only):
                           * the kernel waits on its predecessor (griddepcontrol.wait: KF_PDL_ENTRY or KF_PDL_WAIT,
                           * templates/common/types.cuh) before any global access */
} gen_kernel;

/* "name/threads/smem[/pdl],..." as stored in the binaries table ("/pdl" only on a kernel launched with programmatic
 * dependent launch); parse returns the count or -1. */
void gen_kernels_format(const gen_kernel *k, int n, char *buf, size_t len);
int gen_kernels_parse(const char *text, gen_kernel *k, int max);

#endif
