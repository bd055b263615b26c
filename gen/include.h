/* gen/include.h: the #include lines of a rendered source: only kforge fragments, by their names, never a file on disk */
#ifndef KF_GEN_INCLUDE_H
#define KF_GEN_INCLUDE_H

#include <stddef.h>

/* Checks every #include (and #include_next, #import, #embed, __has_include) of src,
 * as the preprocessor sees it (after line splices, outside comments and literals):
 * each must name, in quotes or angle brackets, one of the n headers in names. An
 * absolute path, a path with "..", a computed include or an unknown name is refused.
 * Returns 0, or -1 with err = "line N includes '/etc/shadow': ..." */
int gen_includes_check(const char *src, const char *const *names, int n, char *err, size_t errn);

#endif
