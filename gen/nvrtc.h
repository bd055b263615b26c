/* gen/nvrtc.h: compile rendered CUDA source to a cubin (or PTX) with NVRTC, with ptxas facts */
#ifndef KF_GEN_NVRTC_H
#define KF_GEN_NVRTC_H

#include <stddef.h>

typedef struct gen_binary_out {
    void *image;          /* cubin, or NUL-terminated PTX text; malloc'd */
    size_t size;
    int is_ptx;
    char *log;            /* the whole NVRTC log; malloc'd, may be empty */
    double ms;            /* wall time of nvrtcCompileProgram */
    int regs;             /* max over the kernels, from ptxas -v */
    int smem_static;      /* max static shared memory over the kernels */
    int spill_bytes;      /* spill stores + loads summed over the kernels */
    int stack_bytes;      /* max stack frame */
    int wgmma_serial;     /* 1: ptxas serialized the kernel's wgmma (its remark C7520; e.g. a wgmma under a condition,
                           * bench/NOTES.md session 22): every wgmma waits for the one before */
} gen_binary_out;

/* "13.0" */
void gen_nvrtc_version(char *buf, size_t n);
/* Whether arch is one kforge compiles for: sm_90a, sm_90, sm_80, sm_86, sm_89, sm_100a... */
int gen_arch_ok(const char *arch);
/* The option string that enters the binary cache key for (arch, ptx). */
void gen_nvrtc_options(const char *arch, int ptx, char *buf, size_t n);

/* Compiles src (program name name, e.g. the variant key), which may #include nothing. Thread-safe.
 * Returns 0; or -1 with err = "nvrtc: <variant>: first lines of the log" and
 * out->log holding the whole log. */
int gen_nvrtc_compile(const char *src, const char *name, const char *arch, int ptx,
                      gen_binary_out *out, char *err, size_t errn);
/* The same with the template's fragments as the only headers the source may #include
 * (gen/include.c refuses any other include before NVRTC runs; no folder is searched). */
int gen_nvrtc_compile_headers(const char *src, const char *name, const char *arch, int ptx,
                              int n_headers, const char *const *names, const char *const *texts,
                              gen_binary_out *out, char *err, size_t errn);
void gen_binary_out_free(gen_binary_out *b);

/* Parses ptxas -v lines of a log into regs/smem/spills/stack and the wgmma serialization remark (exposed for tests). */
void gen_parse_ptxas_log(const char *log, gen_binary_out *out);

#endif
