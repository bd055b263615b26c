/* db/bundle.h: kernel bundles: one SQLite file of winners and their cubins for a GPU model, checksummed */
#ifndef KF_DB_BUNDLE_H
#define KF_DB_BUNDLE_H

#include <stddef.h>

#include "db/db.h"

#define DB_BUNDLE_FORMAT 1

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
/* Verifies the bundle at path (see db_bundle_load) and merges it into s: binaries
 * added when absent, winners replacing those of the same (gpu, family, shape). */
db_rc db_bundle_import(db_store *s, const char *path, int *n_winners, int *n_binaries);

/* Opens and verifies a bundle: the kforge marker, the format
 * version, want_arch (when not NULL), the content checksum and each image's
 * SHA-256 (a damaged b-tree fails SQLite's reads); the whole content is then held in
 * memory. 0, or -1 with err "cannot load bundle 'path': why". Never crashes on a
 * damaged file. */
int db_bundle_load(const char *path, const char *want_arch, db_bundle **out, char *err, size_t errn);
void db_bundle_free(db_bundle *b);
const char *db_bundle_gpu(const db_bundle *b);
const char *db_bundle_arch(const db_bundle *b);
int db_bundle_n_winners(const db_bundle *b);
const db_bundle_winner *db_bundle_winner_at(const db_bundle *b, int i);
const db_bundle_binary *db_bundle_find(const db_bundle *b, const char *cache_key);

/* SHA-256 of data as 64 hex digits. */
void db_sha256_hex(const void *data, size_t n, char hex[65]);

#endif
