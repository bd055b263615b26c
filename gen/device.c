/* gen/device.c: a device's facts as the templates see them (gen_device): the known architectures' facts; core (both libraries) */
#include "gen/device.h"

#include <stdio.h>
#include <string.h>

int gen_device_for_arch(gen_device *d, const char *arch)
{
    memset(d, 0, sizeof *d);
    snprintf(d->arch, sizeof d->arch, "%s", arch);
    if (strcmp(arch, "sm_90a") == 0 || strcmp(arch, "sm_90") == 0) {
        d->cc = 90;               /* NVIDIA H200 SXM */
        d->sms = 132;
        d->smem_optin = 232448;
        d->smem_sm = 233472;
        d->regs_sm = 65536;
        d->l2 = 62914560;
        return 0;
    }
    if (strcmp(arch, "sm_80") == 0) {
        d->cc = 80;               /* NVIDIA A100 */
        d->sms = 108;
        d->smem_optin = 166912;
        d->smem_sm = 167936;
        d->regs_sm = 65536;
        d->l2 = 41943040;
        return 0;
    }
    return -1;
}
