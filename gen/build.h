/* gen/build.h: variants to binaries through the cache: render, key, look up, compile in parallel, store */
#ifndef KF_GEN_BUILD_H
#define KF_GEN_BUILD_H

#include "db/db.h"
#include "gen/nvrtc.h"
#include "gen/template.h"

#define GEN_MAX_KERNELS 4

typedef struct gen_job {
    /* inputs */
    gen_tmpl *tmpl;
    gen_kvset fixed, params;
    /* filled by gen_build_prepare */
    char variant_key[512];
    char binary_key[512];
    char cache_key[600];
    char *src;
    gen_kernel kernels[GEN_MAX_KERNELS];
    int n_kernels;
    /* results */
    int failed;            /* compile error: err has the message */
    int cache_hit;         /* found in the database, not compiled */
    gen_binary_out bin;    /* cubin of a compile or of the cache */
    char err[2048];
} gen_job;

typedef struct gen_target {
    char arch[16];
    int ptx;
    gen_device dev;
    char nvrtc[16];
    char options[256];
    char rev[48];          /* the kforge revision that renders (KF_GIT_REV): named in the banner */
} gen_target;

/* Target for arch (facts of the real device when dev != NULL). */
int gen_target_init(gen_target *t, const char *arch, int ptx, const gen_device *dev);

/* Renders and keys one job; -1 with the host's message on error. */
int gen_build_prepare(gen_job *j, const gen_target *tg);
/* The source NVRTC sees for tg: the template's render (gen_tmpl_render: banner of template, hash and
 * binary key, then the body) with two more banner lines, the target (arch, NVRTC version, options) and
 * the kforge revision. With key_src != NULL also the same text without the revision line, which the
 * cache key hashes: a binary is the same whatever build of kforge rendered it, when everything else
 * is (every other banner fact is in the key already). *src, *key_src malloc'd. */
int gen_build_render(gen_tmpl *t, const gen_kvset *fixed, const gen_kvset *params, const gen_target *tg, char **src,
                     char **key_src);
/* Cache key of a prepared job's binary (also used by the runtime): the binary key, the
 * template hash, a hash of the rendered source (exactly the bytes NVRTC compiles but the banner's
 * kforge revision line: gen_build_render; the headers it may include are covered by the template
 * hash), NVRTC version, arch, options. */
void gen_cache_key(const char *binary_key, const char *template_hash, const char *source,
                   const gen_target *tg, char *buf, size_t n);

typedef void (*gen_progress_fn)(const gen_job *j, int done, int total, void *arg);

/* Looks every prepared job up in db (may be NULL), compiles the misses on
 * `threads` threads, stores each new binary as soon as it is built. A binary
 * (compiled or cached) lacking a kernel the job names is a failed job, never stored.
 * Failed compiles stay in their job (failed, err). Returns the number of failed jobs,
 * or -1 when the database write failed (message in dberr). */
int gen_build_run(gen_job *jobs, int n, int threads, db_store *db, const gen_target *tg,
                  gen_progress_fn progress, void *arg, char *dberr, size_t dberrn);
void gen_job_free(gen_job *j);

#endif
