/* db/bundle.h: kernel bundles: one SQLite file of winners and their cubins for a GPU model, checksummed */
#ifndef KF_DB_BUNDLE_H
#define KF_DB_BUNDLE_H

#include <stddef.h>

#include "core/err.h"
#include "db/db.h"
#include "gen/kv.h"

/* 2: the content checksum covers the meta table (GPU model, arch, NVRTC, ...). A
 * bundle of format 1 is refused with a message to export it again. */
#define DB_BUNDLE_FORMAT 2
/* Longest cache or variant key, and shape key, a bundle may hold (with the NUL): what
 * the runtime's tables keep. */
#define DB_BUNDLE_KEY_MAX 512
#define DB_BUNDLE_SHAPE_MAX 512

typedef struct db_bundle db_bundle;

typedef struct db_bundle_winner {
    char *family, *shape_key, *variant_key, *cache_key, *params;
    double median_ms, speedup, band;
} db_bundle_winner;

typedef struct db_bundle_binary {
    char *cache_key, *variant_key, *family, *nvrtc, *params, *kernels;
    void *image;
    size_t size;
    char sha256[65];           /* as stored; checked against the image when loaded */
} db_bundle_binary;

/* Writes the winners of gpu (and family, when not NULL) with their binaries from s
 * into a new bundle at path (written to a temporary file, then renamed). The same
 * content gives the same bytes. Counts of what was written in n_winners/n_binaries. */
db_rc db_bundle_export(db_store *s, const char *gpu, const char *family, const char *path,
                       const char *kforge_rev, int *n_winners, int *n_binaries);
/* Verifies each of the n bundles at paths (db_bundle_load: what kf_open would refuse
 * is refused here) and merges them all into s in one transaction, in order: binaries
 * added when absent (one already there under the same cache key must have the same
 * image, else the import is refused), winners replacing those of the same (gpu, family,
 * shape), so a
 * later bundle's winner replaces an earlier one's. All or nothing: when any bundle is
 * refused or any write fails, nothing is written and the message names the bundle and
 * why. n_winners[i] / n_binaries[i] (arrays of n) get what bundle i added (0 on failure). */
db_rc db_bundle_import(db_store *s, const char *const *paths, int n, int *n_winners, int *n_binaries);

/* Opens and verifies a bundle: a regular file (a symbolic link is followed) whose
 * SQLite header has the kforge marker and the size of the file, exactly the schema
 * export writes, the format version, want_arch (when not NULL), the content checksum
 * (meta and every row) and each image's SHA-256 (a damaged b-tree fails SQLite's
 * reads), then every field as the runtime will parse it: keys, family, canonical
 * shape keys and params, the kernel list, non-empty images, no duplicates, every
 * winner with its binary and every binary with a winner. The whole content is then
 * held in memory. 0, or -1 with KF_ERR_BUNDLE and "cannot load bundle 'path': why" in *e. Never
 * crashes on a damaged file. The one check of a bundle: kf_open and db_bundle_import both use it. */
int db_bundle_load(const char *path, const char *want_arch, db_bundle **out, core_err *e);
void db_bundle_free(db_bundle *b);
const char *db_bundle_gpu(const db_bundle *b);
const char *db_bundle_arch(const db_bundle *b);
int db_bundle_n_winners(const db_bundle *b);
const db_bundle_winner *db_bundle_winner_at(const db_bundle *b, int i);
const db_bundle_binary *db_bundle_find(const db_bundle *b, const char *cache_key);

/* A winner's shape key ("b1.causal0.d128.dtype-bf16...") as the set of its fields, as
 * the runtime reads it; -1 with KF_ERR_BUNDLE in *e when it is empty, too long, not name/value
 * tokens or not in the canonical form gen_kv_keyform writes. */
int db_bundle_shape_parse(const char *shape_key, gen_kvset *out, core_err *e);

/* SHA-256 of data as 64 hex digits. */
void db_sha256_hex(const void *data, size_t n, char hex[65]);

#endif
