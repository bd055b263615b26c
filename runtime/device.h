/* runtime/device.h: a device's facts (rt_devinfo) as the templates see them (gen_device) */
#ifndef KF_RT_DEVICE_H
#define KF_RT_DEVICE_H

#include "gen/device.h"
#include "runtime/cuda.h"

void rt_gen_device(const rt_devinfo *info, gen_device *dev);

#endif
