/* db/migrate.h: schema versions, the steps between them, and the check that a file is kforge's */
#ifndef KF_DB_MIGRATE_H
#define KF_DB_MIGRATE_H

#include "db/store.h"

/* Called by db_open on a fresh connection: refuses files that are not kforge's
 * or are newer than this build, turns on WAL and migrates (unless read-only). */
db_rc db_schema_open(db_store *s);

/* Migrates s to version target (<= DB_SCHEMA_VERSION) in one IMMEDIATE
 * transaction, checking the version again after taking the lock. */
db_rc db_migrate(db_store *s, int target);

/* For tests: creates the database path (must not exist) at schema version
 * `version` (0 = an empty file) by running the steps up to it, with no WAL. */
db_rc db_create_at_version(const char *path, int version, char *msg, size_t msgsize);

#endif
