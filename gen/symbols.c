/* gen/symbols.c: the kernel entry points a binary defines: a cubin's ELF symbol table, a PTX module's .entry lines */
#include "gen/symbols.h"

#include <ctype.h>
#include <elf.h>
#include <string.h>

#define STO_CUDA_ENTRY 0x10    /* st_other bit of a __global__ function in a cubin */

static int ptx_has_entry(const char *ptx, size_t size, const char *name)
{
    size_t nl = strlen(name);
    int comment = 0;           /* inside a block comment */
    for (size_t i = 0; i < size && ptx[i];) {
        size_t e = i;
        while (e < size && ptx[e] && ptx[e] != '\n')
            e++;
        /* one line [i, e): words outside comments; ".entry NAME" then '(' or the line end */
        const char *w[3] = {0};
        size_t wl[3] = {0};
        int nw = 0;
        for (size_t k = i; k < e && nw < 3;) {
            if (comment) {
                if (ptx[k] == '*' && k + 1 < e && ptx[k + 1] == '/')
                    comment = 0, k += 2;
                else
                    k++;
            } else if (ptx[k] == '/' && k + 1 < e && ptx[k + 1] == '/') {
                break;
            } else if (ptx[k] == '/' && k + 1 < e && ptx[k + 1] == '*') {
                comment = 1, k += 2;
            } else if (isspace((unsigned char)ptx[k]) || ptx[k] == '(') {
                k++;
            } else {
                size_t s = k;
                while (k < e && !isspace((unsigned char)ptx[k]) && ptx[k] != '(' && ptx[k] != '/')
                    k++;
                if (k == s)
                    k++;
                w[nw] = ptx + s;
                wl[nw++] = k - s;
            }
        }
        for (int k = 0; k + 1 < nw; k++)
            if (wl[k] == 6 && !strncmp(w[k], ".entry", 6) && wl[k + 1] == nl && !strncmp(w[k + 1], name, nl))
                return 1;
        i = e + 1;
    }
    return 0;
}

static int cubin_has_entry(const unsigned char *img, size_t size, const char *name)
{
    if (size < sizeof(Elf64_Ehdr) || memcmp(img, ELFMAG, SELFMAG) || img[EI_CLASS] != ELFCLASS64 ||
        img[EI_DATA] != ELFDATA2LSB)
        return -1;
    Elf64_Ehdr eh;
    memcpy(&eh, img, sizeof eh);
    if (eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shoff > size ||
        (size - eh.e_shoff) / sizeof(Elf64_Shdr) < eh.e_shnum)
        return -1;
    int found = 0, tables = 0;
    for (unsigned s = 0; s < eh.e_shnum; s++) {
        Elf64_Shdr sh, st;
        memcpy(&sh, img + eh.e_shoff + (size_t)s * sizeof sh, sizeof sh);
        if (sh.sh_type != SHT_SYMTAB)
            continue;
        if (sh.sh_entsize != sizeof(Elf64_Sym) || sh.sh_offset > size || sh.sh_size > size - sh.sh_offset ||
            sh.sh_link >= eh.e_shnum)
            return -1;
        memcpy(&st, img + eh.e_shoff + (size_t)sh.sh_link * sizeof st, sizeof st);
        if (st.sh_offset > size || st.sh_size > size - st.sh_offset)
            return -1;
        tables++;
        const char *strs = (const char *)img + st.sh_offset;
        for (size_t k = 0; k < sh.sh_size / sizeof(Elf64_Sym); k++) {
            Elf64_Sym sym;
            memcpy(&sym, img + sh.sh_offset + k * sizeof sym, sizeof sym);
            if (sym.st_name >= st.sh_size)
                return -1;
            const char *nm = strs + sym.st_name;
            size_t room = st.sh_size - sym.st_name;
            if (ELF64_ST_TYPE(sym.st_info) == STT_FUNC && (sym.st_other & STO_CUDA_ENTRY) &&
                sym.st_shndx != SHN_UNDEF && strnlen(nm, room) == strlen(name) && strlen(name) < room &&
                !strcmp(nm, name))
                found = 1;
        }
    }
    return tables ? found : 0;
}

int gen_binary_has_kernel(const void *image, size_t size, int is_ptx, const char *name)
{
    if (!image || !name || !*name)
        return -1;
    return is_ptx ? ptx_has_entry(image, size, name) : cubin_has_entry(image, size, name);
}
