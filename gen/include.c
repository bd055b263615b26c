/* gen/include.c: the #include lines of a rendered source: only kforge fragments, by their names, never a file on disk */
#include "gen/include.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Where the scanner may differ from the compiler's preprocessor it takes both readings:
 * a backslash followed by spaces before the line end is read as a splice in one pass
 * and not in the other, and a '#' that follows only comments on its physical line
 * counts as a directive. Every reading must pass. */
typedef struct scan {
    const char *t;        /* the source after line splices */
    const int *line;      /* original line of each byte of t */
    size_t n;
    const char *const *names;
    int n_names;
    char *err;
    size_t errn;
} scan;

static int ident(int c) { return isalnum(c) || c == '_' || c == '$'; }

/* Skips spaces (not newlines) and block comments from i. */
static size_t skip_space(const scan *s, size_t i)
{
    for (;;) {
        while (i < s->n && (s->t[i] == ' ' || s->t[i] == '\t' || s->t[i] == '\f' || s->t[i] == '\v' ||
                            s->t[i] == '\r'))
            i++;
        if (i + 1 < s->n && s->t[i] == '/' && s->t[i + 1] == '*') {
            const char *e = strstr(s->t + i + 2, "*/");
            i = e ? (size_t)(e - s->t) + 2 : s->n;
            continue;
        }
        return i;
    }
}

static int refuse(const scan *s, size_t at, const char *name, const char *why)
{
    snprintf(s->err, s->errn, "line %d includes '%s': %s (a render may include only the fragments its "
             "template lists in includes)", s->line[at < s->n ? at : s->n - 1], name, why);
    return -1;
}

/* The header name at i ("x" or <x>) of a directive or __has_include: it must be a listed fragment. */
static int check_name(const scan *s, size_t i, const char *what)
{
    char name[256];
    i = skip_space(s, i);
    char close = i < s->n && s->t[i] == '"' ? '"' : i < s->n && s->t[i] == '<' ? '>' : 0;
    if (!close) {
        size_t e = i;
        while (e < s->n && s->t[e] != '\n' && e - i < 60)
            e++;
        snprintf(name, sizeof name, "%.*s", (int)(e - i), s->t + i);
        return refuse(s, i, name, what);
    }
    size_t e = i + 1;
    while (e < s->n && s->t[e] != close && s->t[e] != '\n')
        e++;
    snprintf(name, sizeof name, "%.*s", (int)(e - i - 1 < 200 ? e - i - 1 : 200), s->t + i + 1);
    if (e >= s->n || s->t[e] != close)
        return refuse(s, i, name, "the header name is not closed");
    if (e - i - 1 >= 200)
        return refuse(s, i, name, "the header name is too long");
    if (name[0] == '/')
        return refuse(s, i, name, "an absolute path");
    if (strstr(name, ".."))
        return refuse(s, i, name, "a path with '..'");
    if (strchr(name, '\\'))
        return refuse(s, i, name, "a path with a backslash");
    for (int k = 0; k < s->n_names; k++)
        if (strcmp(s->names[k], name) == 0)
            return 0;
    return refuse(s, i, name, "not one of the template's fragments");
}

/* A directive at i (just after '#' or '%:'). */
static int directive(const scan *s, size_t i)
{
    i = skip_space(s, i);
    size_t e = i;
    while (e < s->n && ident((unsigned char)s->t[e]))
        e++;
    size_t len = e - i;
    static const char *const inc[] = {"include", "include_next", "import", "embed", NULL};
    for (const char *const *k = inc; *k; k++)
        if (len == strlen(*k) && strncmp(s->t + i, *k, len) == 0)
            return check_name(s, e, "a computed include (not a quoted or <> name)");
    if (len == 6 && strncmp(s->t + i, "pragma", 6) == 0) {
        size_t le = e;
        while (le < s->n && s->t[le] != '\n')
            le++;
        char line[200];
        snprintf(line, sizeof line, "%.*s", (int)(le - e < 199 ? le - e : 199), s->t + e);
        if (strstr(line, "dependency"))
            return refuse(s, e, line, "a pragma naming a file");
    }
    return 0;
}

/* The identifier (or number) that ends just before i starts at the returned index. */
static size_t word_start(const scan *s, size_t i)
{
    while (i > 0 && ident((unsigned char)s->t[i - 1]))
        i--;
    return i;
}

static int is_raw_prefix(const scan *s, size_t w, size_t i)
{
    static const char *const pre[] = {"R", "u8R", "uR", "UR", "LR", NULL};
    for (const char *const *p = pre; *p; p++)
        if (i - w == strlen(*p) && strncmp(s->t + w, *p, i - w) == 0)
            return 1;
    return 0;
}

static int scan_text(scan *s)
{
    int at_start = 1;          /* only spaces and comments since the last newline */
    for (size_t i = 0; i < s->n;) {
        char c = s->t[i];
        if (c == '\n') {
            at_start = 1;
            i++;
        } else if (c == ' ' || c == '\t' || c == '\f' || c == '\v' || c == '\r') {
            i++;
        } else if (c == '/' && i + 1 < s->n && s->t[i + 1] == '/') {
            while (i < s->n && s->t[i] != '\n')
                i++;
        } else if (c == '/' && i + 1 < s->n && s->t[i + 1] == '*') {
            i += 2;
            while (i < s->n && !(s->t[i] == '*' && i + 1 < s->n && s->t[i + 1] == '/')) {
                if (s->t[i] == '\n')
                    at_start = 1;
                i++;
            }
            i += 2;
        } else if (at_start && (c == '#' || (c == '%' && i + 1 < s->n && s->t[i + 1] == ':'))) {
            if (directive(s, i + (c == '#' ? 1 : 2)))
                return -1;
            at_start = 0;
            i += c == '#' ? 1 : 2;
        } else if (c == '"' || c == '\'') {
            size_t w = word_start(s, i);
            at_start = 0;
            if (c == '\'' && w < i && isdigit((unsigned char)s->t[w])) {
                i++;           /* a digit separator: 1'000 */
                continue;
            }
            if (c == '"' && w < i && is_raw_prefix(s, w, i)) {
                size_t d = i + 1;
                while (d < s->n && d - i - 1 < 16 && s->t[d] != '(' && !strchr(" ()\\\t\v\f\n\"", s->t[d]))
                    d++;
                if (d < s->n && s->t[d] == '(') {
                    char end[20];
                    snprintf(end, sizeof end, ")%.*s\"", (int)(d - i - 1), s->t + i + 1);
                    const char *e = strstr(s->t + d + 1, end);
                    i = e ? (size_t)(e - s->t) + strlen(end) : s->n;
                    continue;
                }
            }
            i++;
            while (i < s->n && s->t[i] != c && s->t[i] != '\n')
                i += s->t[i] == '\\' && i + 1 < s->n && s->t[i + 1] != '\n' ? 2 : 1;
            if (i < s->n && s->t[i] == c)
                i++;
        } else if (ident((unsigned char)c)) {
            size_t e = i;
            while (e < s->n && ident((unsigned char)s->t[e]))
                e++;
            if ((e - i == 13 && strncmp(s->t + i, "__has_include", 13) == 0) ||
                (e - i == 18 && strncmp(s->t + i, "__has_include_next", 18) == 0)) {
                size_t p = skip_space(s, e);
                if (p >= s->n || s->t[p] != '(')
                    return refuse(s, e, "__has_include", "a computed include (not a quoted or <> name)");
                if (check_name(s, p + 1, "a computed include (not a quoted or <> name)"))
                    return -1;
            }
            at_start = 0;
            i = e;
        } else {
            at_start = 0;
            i++;
        }
    }
    return 0;
}

/* Removes backslash-newline (and, with loose, backslash-spaces-newline) splices. */
static int splice(const char *src, int loose, char **t, int **line, size_t *n)
{
    size_t len = strlen(src);
    *t = malloc(len + 1);
    *line = malloc((len + 1) * sizeof(int));
    if (!*t || !*line) {
        free(*t);
        free(*line);
        return -1;
    }
    size_t w = 0;
    int ln = 1;
    for (size_t i = 0; i < len;) {
        if (src[i] == '\\') {
            size_t j = i + 1;
            while (loose && j < len && (src[j] == ' ' || src[j] == '\t'))
                j++;
            if (j < len && src[j] == '\r' && j + 1 < len && src[j + 1] == '\n')
                j++;
            if (j < len && src[j] == '\n') {
                ln++;
                i = j + 1;
                continue;
            }
        }
        (*line)[w] = ln;
        if (src[i] == '\n')
            ln++;
        (*t)[w++] = src[i++];
    }
    (*t)[w] = 0;
    (*line)[w] = ln;
    *n = w;
    return 0;
}

int gen_includes_check(const char *src, const char *const *names, int n, char *err, size_t errn)
{
    for (int loose = 0; loose < 2; loose++) {
        scan s = {0};
        char *t;
        int *line;
        if (splice(src, loose, &t, &line, &s.n)) {
            snprintf(err, errn, "out of memory checking the includes");
            return -1;
        }
        s.t = t;
        s.line = line;
        s.names = names;
        s.n_names = n;
        s.err = err;
        s.errn = errn;
        int rc = s.n ? scan_text(&s) : 0;
        free(t);
        free(line);
        if (rc)
            return -1;
    }
    return 0;
}
