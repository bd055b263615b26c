/* gen/source.c: where template files come from: the embedded copy or a folder that overrides it */
#include "gen/source.h"
#include "gen/embed.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void gen_source_init(gen_source *s, const char *dir)
{
    if (!dir || !*dir)
        dir = getenv("KFORGE_TEMPLATE_DIR");
    snprintf(s->dir, sizeof s->dir, "%s", dir ? dir : "");
    size_t n = strlen(s->dir);
    while (n > 1 && s->dir[n - 1] == '/')
        s->dir[--n] = 0;
}

const char *gen_source_describe(const gen_source *s) { return s->dir[0] ? s->dir : "embedded"; }

static int safe_path(const char *p)
{
    return p[0] && p[0] != '/' && !strstr(p, "..");
}

int gen_source_read(const gen_source *s, const char *path, char **data, size_t *len,
                    char *err, size_t errn)
{
    *data = NULL;
    if (!safe_path(path)) {
        snprintf(err, errn, "bad template path '%s'", path);
        return -1;
    }
    if (!s->dir[0]) {
        for (const gen_embedded_file *f = gen_embedded_files; f->path; f++)
            if (strcmp(f->path, path) == 0) {
                *data = malloc(f->size + 1);
                if (!*data) {
                    snprintf(err, errn, "out of memory");
                    return -1;
                }
                memcpy(*data, f->data, f->size);
                (*data)[f->size] = 0;
                if (len)
                    *len = f->size;
                return 0;
            }
        snprintf(err, errn, "no template file 'templates/%s' (embedded)", path);
        return -1;
    }
    char full[2048];
    snprintf(full, sizeof full, "%s/%s", s->dir, path);
    FILE *fp = fopen(full, "rb");
    if (!fp) {
        snprintf(err, errn, "cannot read template file '%s'", full);
        return -1;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf) {
            fclose(fp);
            snprintf(err, errn, "out of memory");
            return -1;
        }
        n += fread(buf + n, 1, cap - n - 1, fp);
        if (n < cap - 1)
            break;
        cap *= 2;
        buf = realloc(buf, cap);
    }
    int bad = ferror(fp);
    fclose(fp);
    if (bad) {
        free(buf);
        snprintf(err, errn, "cannot read template file '%s'", full);
        return -1;
    }
    buf[n] = 0;
    *data = buf;
    if (len)
        *len = n;
    return 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

int gen_source_each(const gen_source *s, const char *sub, const char *suffix,
                    int (*fn)(const char *path, void *arg), void *arg)
{
    char *names[512];
    int n = 0;
    size_t sl = strlen(sub);
    if (!s->dir[0]) {
        for (const gen_embedded_file *f = gen_embedded_files; f->path && n < 512; f++) {
            const char *rest = f->path;
            if (sl) {
                if (strncmp(rest, sub, sl) != 0 || rest[sl] != '/')
                    continue;
                rest += sl + 1;
            }
            if (strchr(rest, '/') || !ends_with(rest, suffix))
                continue;
            names[n++] = strdup(f->path);
        }
    } else {
        char full[2048];
        snprintf(full, sizeof full, "%s%s%s", s->dir, sl ? "/" : "", sub);
        DIR *d = opendir(full);
        if (!d)
            return -1;
        struct dirent *e;
        while ((e = readdir(d)) && n < 512) {
            if (e->d_name[0] == '.' || !ends_with(e->d_name, suffix))
                continue;
            char p[1024];
            snprintf(p, sizeof p, "%s%s%s", sub, sl ? "/" : "", e->d_name);
            names[n++] = strdup(p);
        }
        closedir(d);
    }
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    int rc = 0;
    for (int i = 0; i < n; i++) {
        if (!rc)
            rc = fn(names[i], arg);
        free(names[i]);
    }
    return rc;
}
