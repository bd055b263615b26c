/* runtime/device.c: a device's facts (rt_devinfo) as the templates see them (gen_device) */
#include "runtime/device.h"

#include <stdio.h>
#include <string.h>

void rt_gen_device(const rt_devinfo *info, gen_device *dev)
{
    memset(dev, 0, sizeof *dev);
    snprintf(dev->arch, sizeof dev->arch, "%s", info->arch);
    dev->cc = info->cc_major * 10 + info->cc_minor;
    dev->sms = info->sms;
    dev->smem_optin = info->smem_optin;
    dev->smem_sm = info->smem_sm;
    dev->regs_sm = info->regs_sm;
    dev->l2 = info->l2;
}
