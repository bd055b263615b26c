/* gen/symbols.h: the kernel entry points a binary defines: a cubin's ELF symbol table, a PTX module's .entry lines */
#ifndef KF_GEN_SYMBOLS_H
#define KF_GEN_SYMBOLS_H

#include <stddef.h>

/* 1 when the image (a cubin, or PTX text when is_ptx) defines the kernel entry name,
 * 0 when it does not, -1 when the image cannot be read (not an ELF64 cubin, a section
 * or symbol outside the image). Reads only the image: no driver, no GPU. */
int gen_binary_has_kernel(const void *image, size_t size, int is_ptx, const char *name);

#endif
