/* runtime/nvml.c: the GPU's SM clock, board power and temperature through NVML, loaded with dlopen (absent: unknown, never an error) */
#include "runtime/nvml.h"

#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The few NVML entry points used, by their documented C signatures (nvml.h is not needed). */
typedef int nvmlReturn_t;
typedef void *nvmlDevice_t;
enum { NVML_SUCCESS = 0, NVML_CLOCK_SM = 1, NVML_TEMPERATURE_GPU = 0 };

static struct {
    nvmlReturn_t (*Init)(void);
    nvmlReturn_t (*ByUUID)(const char *, nvmlDevice_t *);
    nvmlReturn_t (*Clock)(nvmlDevice_t, int, unsigned *);
    nvmlReturn_t (*Power)(nvmlDevice_t, unsigned *);
    nvmlReturn_t (*Temp)(nvmlDevice_t, int, unsigned *);
} g_nv;
static int g_state;                 /* 0 not tried, 1 loaded, -1 absent */
static char g_why[300];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;

struct rt_nvml_dev {
    nvmlDevice_t h;
};

static void load(void)
{
    const char *name = getenv("KFORGE_NVML_LIB");
    if (!name || !*name)
        name = "libnvidia-ml.so.1";
    void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *e = dlerror();
        snprintf(g_why, sizeof g_why, "%s: %s", name, e ? e : "cannot open");
        g_state = -1;
        return;
    }
    *(void **)&g_nv.Init = dlsym(lib, "nvmlInit_v2");
    *(void **)&g_nv.ByUUID = dlsym(lib, "nvmlDeviceGetHandleByUUID");
    *(void **)&g_nv.Clock = dlsym(lib, "nvmlDeviceGetClockInfo");
    *(void **)&g_nv.Power = dlsym(lib, "nvmlDeviceGetPowerUsage");
    *(void **)&g_nv.Temp = dlsym(lib, "nvmlDeviceGetTemperature");
    if (!g_nv.Init || !g_nv.ByUUID || !g_nv.Clock || !g_nv.Power || !g_nv.Temp) {
        snprintf(g_why, sizeof g_why, "%s: an NVML function is missing", name);
        g_state = -1;
        return;
    }
    int r = g_nv.Init();
    if (r != NVML_SUCCESS) {
        snprintf(g_why, sizeof g_why, "%s: nvmlInit_v2 returned %d", name, r);
        g_state = -1;
        return;
    }
    g_state = 1;
}

const char *rt_nvml_why(void)
{
    pthread_mutex_lock(&g_mu);
    static char copy[sizeof g_why];
    snprintf(copy, sizeof copy, "%s", g_why);
    pthread_mutex_unlock(&g_mu);
    return copy;
}

rt_nvml_dev *rt_nvml_open(const char *uuid)
{
    pthread_once(&g_once, load);
    if (g_state != 1 || !uuid || !*uuid)
        return NULL;
    nvmlDevice_t h = NULL;
    int r = g_nv.ByUUID(uuid, &h);
    if (r != NVML_SUCCESS || !h) {
        pthread_mutex_lock(&g_mu);
        snprintf(g_why, sizeof g_why, "nvmlDeviceGetHandleByUUID('%s') returned %d", uuid, r);
        pthread_mutex_unlock(&g_mu);
        return NULL;
    }
    rt_nvml_dev *d = malloc(sizeof *d);
    if (d)
        d->h = h;
    return d;
}

void rt_nvml_close(rt_nvml_dev *d) { free(d); }

void rt_nvml_read(rt_nvml_dev *d, rt_nvml_reading *out)
{
    out->sm_mhz = out->power_w = out->temp_c = NAN;
    if (!d)
        return;
    unsigned v = 0;
    if (g_nv.Clock(d->h, NVML_CLOCK_SM, &v) == NVML_SUCCESS)
        out->sm_mhz = v;
    if (g_nv.Power(d->h, &v) == NVML_SUCCESS)
        out->power_w = v / 1000.0;          /* milliwatts */
    if (g_nv.Temp(d->h, NVML_TEMPERATURE_GPU, &v) == NVML_SUCCESS)
        out->temp_c = v;
}
