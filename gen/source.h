/* gen/source.h: where template files come from: the embedded copy or a folder that overrides it */
#ifndef KF_GEN_SOURCE_H
#define KF_GEN_SOURCE_H

#include <stddef.h>

typedef struct gen_source {
    char dir[1024];   /* empty: the embedded files */
} gen_source;

/* dir NULL: $KFORGE_TEMPLATE_DIR if set, else the embedded files. */
void gen_source_init(gen_source *s, const char *dir);
/* "embedded" or the folder. */
const char *gen_source_describe(const gen_source *s);
/* Reads templates/<path> into a malloc'd NUL-terminated buffer. Paths are
 * relative, without "..". Returns 0, or -1 with a message in err. */
int gen_source_read(const gen_source *s, const char *path, char **data, size_t *len,
                    char *err, size_t errn);
/* Calls fn for every file directly in folder sub ("" for the top) whose name
 * ends with suffix, sorted by name; fn gets the path relative to templates/. */
int gen_source_each(const gen_source *s, const char *sub, const char *suffix,
                    int (*fn)(const char *path, void *arg), void *arg);

#endif
