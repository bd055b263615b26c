/* gen/nvrtc.c: compile rendered CUDA source to a cubin (or PTX) with NVRTC, with ptxas facts */
#include "gen/nvrtc.h"
#include "gen/include.h"

#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void gen_nvrtc_version(char *buf, size_t n)
{
    int major = 0, minor = 0;
    nvrtcVersion(&major, &minor);
    snprintf(buf, n, "%d.%d", major, minor);
}

int gen_arch_ok(const char *arch)
{
    static const char *const known[] = {"sm_80", "sm_86", "sm_87", "sm_89", "sm_90", "sm_90a",
                                        "sm_100", "sm_100a", "sm_120", NULL};
    for (const char *const *k = known; *k; k++)
        if (strcmp(*k, arch) == 0)
            return 1;
    return 0;
}

/* Options are fixed per (arch, ptx): one list, shared by the compile and the cache key. */
static int build_options(const char *arch, int ptx, char opts[][64], const char **argv)
{
    int n = 0;
    if (ptx)
        snprintf(opts[n++], 64, "--gpu-architecture=compute_%s", arch + 3);
    else
        snprintf(opts[n++], 64, "--gpu-architecture=%s", arch);
    snprintf(opts[n++], 64, "-std=c++17");
    snprintf(opts[n++], 64, "-default-device");
    snprintf(opts[n++], 64, "--ptxas-options=-v");
    snprintf(opts[n++], 64, "-no-source-include");   /* headers come from kforge, never from a folder */
    const char *li = getenv("KFORGE_LINEINFO");          /* profiling: source lines in the cubin (ncu, nvdisasm -g) */
    if (li && *li && strcmp(li, "0") != 0)
        snprintf(opts[n++], 64, "-lineinfo");
    for (int i = 0; i < n; i++)
        argv[i] = opts[i];
    return n;
}

void gen_nvrtc_options(const char *arch, int ptx, char *buf, size_t n)
{
    char opts[8][64];
    const char *argv[8];
    int k = build_options(arch, ptx, opts, argv);
    buf[0] = 0;
    size_t len = 0;
    for (int i = 0; i < k && len < n; i++)
        len += (size_t)snprintf(buf + len, n - len, "%s%s", i ? " " : "", argv[i]);
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

void gen_parse_ptxas_log(const char *log, gen_binary_out *out)
{
    for (const char *p = log; p && *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        char line[512];
        snprintf(line, sizeof line, "%.*s", (int)(len < 511 ? len : 511), p);
        const char *u = strstr(line, "Used ");
        int v;
        if (u && sscanf(u, "Used %d registers", &v) == 1 && v > out->regs)
            out->regs = v;
        const char *s = strstr(line, "bytes smem");
        if (s) {
            const char *b = s;
            while (b > line && b[-1] == ' ')
                b--;
            while (b > line && b[-1] >= '0' && b[-1] <= '9')
                b--;
            if (sscanf(b, "%d", &v) == 1 && v > out->smem_static)
                out->smem_static = v;
        }
        if (strstr(line, "C7520") || strstr(line, "wgmma.mma_async instructions are serialized"))
            out->wgmma_serial = 1;
        int stack, st, ld;
        const char *f = strstr(line, "bytes stack frame");
        if (f) {
            const char *b = f;
            while (b > line && b[-1] == ' ')
                b--;
            while (b > line && b[-1] >= '0' && b[-1] <= '9')
                b--;
            if (sscanf(b, "%d bytes stack frame, %d bytes spill stores, %d bytes spill loads", &stack,
                       &st, &ld) == 3) {
                out->spill_bytes += st + ld;
                if (stack > out->stack_bytes)
                    out->stack_bytes = stack;
            }
        }
        p = nl ? nl + 1 : NULL;
    }
}

static void first_lines(const char *log, int lines, char *buf, size_t n)
{
    size_t len = 0;
    buf[0] = 0;
    for (const char *p = log; p && *p && lines > 0 && len + 1 < n; lines--) {
        const char *nl = strchr(p, '\n');
        size_t l = nl ? (size_t)(nl - p) : strlen(p);
        int w = snprintf(buf + len, n - len, "\n  %.*s", (int)l, p);
        if (w < 0)
            break;
        len += (size_t)w;
        p = nl ? nl + 1 : NULL;
    }
}

int gen_nvrtc_compile(const char *src, const char *name, const char *arch, int ptx,
                      gen_binary_out *out, char *err, size_t errn)
{
    return gen_nvrtc_compile_headers(src, name, arch, ptx, 0, NULL, NULL, out, err, errn);
}

int gen_nvrtc_compile_headers(const char *src, const char *name, const char *arch, int ptx,
                              int n_headers, const char *const *names, const char *const *texts,
                              gen_binary_out *out, char *err, size_t errn)
{
    memset(out, 0, sizeof *out);
    if (!gen_arch_ok(arch)) {
        snprintf(err, errn, "unknown arch '%s' (sm_80, sm_86, sm_89, sm_90, sm_90a, ...)", arch);
        return -1;
    }
    char why[512];
    if (gen_includes_check(src, names, n_headers, why, sizeof why)) {
        snprintf(err, errn, "nvrtc: %s: %s", name, why);
        return -1;
    }
    char opts[8][64];
    const char *argv[8];
    int argc = build_options(arch, ptx, opts, argv);
    char progname[300];
    snprintf(progname, sizeof progname, "%s.cu", name);
    nvrtcProgram prog;
    nvrtcResult r = nvrtcCreateProgram(&prog, src, progname, n_headers, (const char **)texts, (const char **)names);
    if (r != NVRTC_SUCCESS) {
        snprintf(err, errn, "nvrtc: %s: %s", name, nvrtcGetErrorString(r));
        return -1;
    }
    double t0 = now_ms();
    nvrtcResult cr = nvrtcCompileProgram(prog, argc, argv);
    out->ms = now_ms() - t0;
    size_t logn = 0;
    nvrtcGetProgramLogSize(prog, &logn);
    out->log = calloc(1, logn + 1);
    if (out->log && logn)
        nvrtcGetProgramLog(prog, out->log);
    if (cr != NVRTC_SUCCESS) {
        char head[1024];
        first_lines(out->log, 8, head, sizeof head);
        snprintf(err, errn, "nvrtc: %s: %s%s", name, nvrtcGetErrorString(cr), head);
        nvrtcDestroyProgram(&prog);
        return -1;
    }
    size_t n = 0;
    r = ptx ? nvrtcGetPTXSize(prog, &n) : nvrtcGetCUBINSize(prog, &n);
    out->image = r == NVRTC_SUCCESS ? malloc(n ? n : 1) : NULL;
    if (out->image)
        r = ptx ? nvrtcGetPTX(prog, out->image) : nvrtcGetCUBIN(prog, out->image);
    nvrtcDestroyProgram(&prog);
    if (r != NVRTC_SUCCESS || !out->image) {
        snprintf(err, errn, "nvrtc: %s: cannot fetch the %s: %s", name, ptx ? "PTX" : "cubin",
                 nvrtcGetErrorString(r));
        gen_binary_out_free(out);
        return -1;
    }
    out->size = n;
    out->is_ptx = ptx;
    gen_parse_ptxas_log(out->log, out);
    return 0;
}

void gen_binary_out_free(gen_binary_out *b)
{
    free(b->image);
    free(b->log);
    memset(b, 0, sizeof *b);
}
