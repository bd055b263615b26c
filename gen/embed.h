/* gen/embed.h: files under templates/ compiled into the binary */
#ifndef KF_GEN_EMBED_H
#define KF_GEN_EMBED_H

#include <stddef.h>

typedef struct gen_embedded_file {
    const char *path;   /* relative to templates/, e.g. "attn_decode.lua" */
    const char *data;   /* NUL-terminated */
    size_t size;
} gen_embedded_file;

/* Terminated by an entry with path == NULL. */
extern const gen_embedded_file gen_embedded_files[];

#endif
