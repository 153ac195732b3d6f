/* loader.c — the library search of loader.h: environment override, then the NVIDIA wheels'
 * folders under each sys.path entry, then the system loader; dlopen + dlsym into a function
 * table. Pure C (no CUDA header): unit-tested on the CPU with fake libraries
 * (tests/test_cuda_build.py).
 */
#include <dlfcn.h>
#include <link.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "loader.h"

/* Append one note to lib->report ("; "-separated, truncated when full). */
static void note(cddp_lib *lib, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(cddp_lib *lib, const char *fmt, ...)
{
    size_t used = strlen(lib->report);
    va_list ap;
    if (used + 8 >= sizeof lib->report)
        return;
    if (used)
        used += (size_t)snprintf(lib->report + used, sizeof lib->report - used, "; ");
    va_start(ap, fmt);
    vsnprintf(lib->report + used, sizeof lib->report - used, fmt, ap);
    va_end(ap);
}

static int is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int exists(const char *path)
{
    return access(path, F_OK) == 0;
}

/* Resolve every symbol of `spec` from `h` into `table`. 0, or -1 with the missing required
 * names listed (comma-separated) in `missing`. */
static int resolve(const cddp_lib_spec *spec, void *h, void *table, char *missing, size_t cap)
{
    size_t used = 0;
    memset(table, 0, spec->table_size);
    missing[0] = '\0';
    for (size_t i = 0; i < spec->nsymbols; i++) {
        const cddp_lib_symbol *s = &spec->symbols[i];
        void *f = dlsym(h, s->name);
        if (f) {
            memcpy((char *)table + s->offset, &f, sizeof f);   /* void* -> function pointer */
        } else if (s->required && used + 2 < cap) {
            used += (size_t)snprintf(missing + used, cap - used, "%s%s", used ? ", " : "", s->name);
            if (used >= cap)
                used = cap - 1;
        }
    }
    return missing[0] ? -1 : 0;
}

/* dlopen `path` (a file, or a bare soname for the system loader) and resolve the table.
 * 1: open (lib->handle, lib->path set); 0: skipped, with the reason noted. */
static int try_open(const cddp_lib_spec *spec, const char *path, cddp_lib *lib, void *table)
{
    char missing[1024];
    struct link_map *lm = NULL;
    void *h;
    const char *why;

    dlerror();
    h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        why = dlerror();
        note(lib, "%s: %s", path, why ? why : "dlopen failed");
        return 0;
    }
    if (resolve(spec, h, table, missing, sizeof missing) < 0) {
        note(lib, "%s lacks %s", path, missing);
        memset(table, 0, spec->table_size);
        dlclose(h);
        return 0;
    }
    lib->handle = h;
    /* the file the system loader picked, for status reports */
    if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && lm->l_name[0])
        path = lm->l_name;
    snprintf(lib->path, sizeof lib->path, "%s", path);
    note(lib, "opened %s", lib->path);
    return 1;
}

/* Try each soname inside `dir`. 1 open, 0 none there (or none usable). */
static int try_dir(const cddp_lib_spec *spec, const char *dir, cddp_lib *lib, void *table,
                   int *found)
{
    char path[4096];
    for (const char *const *so = spec->sonames; *so; so++) {
        if (snprintf(path, sizeof path, "%s/%s", dir, *so) >= (int)sizeof path)
            continue;
        if (!exists(path))
            continue;
        if (found)
            (*found)++;
        if (try_open(spec, path, lib, table))
            return 1;
    }
    return 0;
}

/* Step 1: the override, authoritative when set. 1 open, 0 unset, CDDP_CUDA_ELIB unusable. */
static int from_override(const cddp_lib_spec *spec, cddp_lib *lib, void *table)
{
    const char *v = spec->env ? getenv(spec->env) : NULL;
    if (!v || !v[0]) {
        if (spec->env)
            note(lib, "%s unset", spec->env);
        return 0;
    }
    if (is_dir(v)) {
        if (try_dir(spec, v, lib, table, NULL))
            return 1;
        return cddp_cuda_seterr(CDDP_CUDA_ELIB, "%s=%s: no usable %s in that directory (%s)",
                                spec->env, v, spec->display,
                                lib->report[0] ? lib->report : "none of its sonames is there");
    }
    if (!exists(v))
        return cddp_cuda_seterr(CDDP_CUDA_ELIB, "%s=%s: no such file or directory", spec->env, v);
    if (try_open(spec, v, lib, table))
        return 1;
    return cddp_cuda_seterr(CDDP_CUDA_ELIB, "%s=%s is not a usable %s library (%s)", spec->env, v,
                            spec->display, lib->report);
}

/* The directory named by the sibling override (a directory, or a file's directory). */
static int from_sibling(const cddp_lib_spec *spec, cddp_lib *lib, void *table)
{
    const char *v = spec->sibling_env ? getenv(spec->sibling_env) : NULL;
    char dir[4096];
    char *slash;
    if (!v || !v[0])
        return 0;
    snprintf(dir, sizeof dir, "%s", v);
    if (!is_dir(dir) && (slash = strrchr(dir, '/')) != NULL)
        *slash = '\0';
    if (!is_dir(dir))
        return 0;
    return try_dir(spec, dir, lib, table, NULL);
}

int cddp_lib_open(const cddp_lib_spec *spec, const char *const *dirs, size_t ndirs,
                  cddp_lib *lib, void *table)
{
    char path[4096];
    int rc, found = 0;
    size_t searched = 0;

    memset(lib, 0, sizeof *lib);
    memset(table, 0, spec->table_size);
    rc = from_override(spec, lib, table);
    if (rc != 0)
        return rc < 0 ? rc : 0;
    if (from_sibling(spec, lib, table))
        return 0;
    for (size_t i = 0; i < ndirs; i++) {
        if (!dirs[i] || !dirs[i][0])
            continue;
        searched++;
        for (const char *const *sub = spec->subdirs; *sub; sub++) {
            if (snprintf(path, sizeof path, "%s/%s", dirs[i], *sub) >= (int)sizeof path || !is_dir(path))
                continue;
            if (try_dir(spec, path, lib, table, &found))
                return 0;
        }
    }
    if (!found) {
        char subs[512] = "";
        size_t used = 0;
        for (const char *const *sub = spec->subdirs; *sub && used < sizeof subs; sub++)
            used += (size_t)snprintf(subs + used, sizeof subs - used, "%s%s", used ? ", " : "", *sub);
        note(lib, "%s under %zu sys.path entries: none there", subs, searched);
    }
    for (const char *const *so = spec->sonames; *so; so++)
        if (try_open(spec, *so, lib, table))
            return 0;
    return cddp_cuda_seterr(CDDP_CUDA_ELIB, "%s not found: %s (searched: %s)", spec->display,
                            spec->hint, lib->report);
}

void cddp_lib_close(cddp_lib *lib)
{
    if (lib->handle)
        dlclose(lib->handle);
    lib->handle = NULL;
    lib->path[0] = '\0';
}
