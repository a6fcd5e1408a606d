/*
 * Lower bound for the VCL-time target of issue 3: the regular-expression
 * work alone of one typical.vcl cache hit, done with PCRE2 and its JIT (the
 * engine varnishd uses), with nothing else of VCL around it.
 *
 * The operations come from typical_hit_regex.tsv: the 28 regex operations
 * the executor benchmark's typical_hit flow performs on its browser request
 * (crates/vcl/benches/common), in order, with the subjects they see, one a
 * line: kind, pattern, subject[, substitution], tab-separated. Kind M is a
 * `~` match, S regsub(), A regsuball(). Substitution follows VRT_regsub:
 * copy up to the match, expand \0..\9, continue after it; later matches of
 * regsuball are searched with PCRE2_NOTEMPTY.
 *
 *   cc -O2 -o pcre2_typical pcre2_typical.c -lpcre2-8
 *   ./pcre2_typical typical_hit_regex.tsv [requests] [-v]
 *
 * -v prints each operation's result once, for comparing with the Rust
 * twin (crates/vcl/examples/regex_profile.rs). bench/bounds/run runs both
 * next to the executor benchmark.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAXOPS 64

struct op {
    char kind;
    char *pattern, *subject, *sub;
    size_t len;
    pcre2_code *code;
};

static struct op ops[MAXOPS];
static size_t nops;
static pcre2_match_data *md;
static char out[8192];

/* Splits one TSV line into its fields; returns how many. */
static int fields(char *line, char **f, int max)
{
    int n = 0;
    line[strcspn(line, "\n")] = 0;
    f[n++] = line;
    for (char *p = line; *p && n < max; p++)
        if (*p == '\t') {
            *p = 0;
            f[n++] = p + 1;
        }
    return n;
}

static int load(const char *path)
{
    FILE *fp = fopen(path, "r");
    char line[4096];
    if (fp == NULL) {
        perror(path);
        return -1;
    }
    while (fgets(line, sizeof line, fp) && nops < MAXOPS) {
        char *f[4];
        int n = fields(line, f, 4);
        struct op *op = &ops[nops];
        int err;
        PCRE2_SIZE off;
        if (n < 3 || strchr("MSA", f[0][0]) == NULL) {
            fprintf(stderr, "%s:%zu: want KIND\\tPATTERN\\tSUBJECT[\\tSUB]\n", path, nops + 1);
            return -1;
        }
        op->kind = f[0][0];
        op->pattern = strdup(f[1]);
        op->subject = strdup(f[2]);
        op->sub = strdup(n > 3 ? f[3] : "");
        op->len = strlen(op->subject);
        op->code = pcre2_compile((PCRE2_SPTR)op->pattern, PCRE2_ZERO_TERMINATED, 0, &err, &off, NULL);
        if (op->code == NULL) {
            fprintf(stderr, "%s:%zu: pattern does not compile\n", path, nops + 1);
            return -1;
        }
        if (pcre2_jit_compile(op->code, PCRE2_JIT_COMPLETE) != 0) {
            fprintf(stderr, "%s:%zu: no JIT for this pattern\n", path, nops + 1);
            return -1;
        }
        nops++;
    }
    fclose(fp);
    return 0;
}

/* Appends the expansion of `sub` for the current match at out[o]. */
static size_t expand(const struct op *op, const PCRE2_SIZE *ov, int n, size_t o)
{
    for (const char *p = op->sub; *p; p++) {
        if (*p == '\\' && p[1] >= '0' && p[1] <= '9') {
            int g = *++p - '0';
            if (g < n && ov[2 * g] != PCRE2_UNSET) {
                size_t l = ov[2 * g + 1] - ov[2 * g];
                memcpy(out + o, op->subject + ov[2 * g], l);
                o += l;
            }
        } else if (*p == '\\' && p[1]) {
            out[o++] = *++p;
        } else {
            out[o++] = *p;
        }
    }
    return o;
}

/* Runs one operation; returns the length of its result (0 or 1 for M). */
static size_t run(const struct op *op)
{
    int n = pcre2_match(op->code, (PCRE2_SPTR)op->subject, op->len, 0, 0, md, NULL);
    size_t o = 0, last = 0;
    if (op->kind == 'M')
        return n > 0;
    while (n > 0) {
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        memcpy(out + o, op->subject + last, ov[0] - last);
        o = expand(op, ov, n, o + ov[0] - last);
        last = ov[1];
        if (op->kind != 'A')
            break;
        n = pcre2_match(op->code, (PCRE2_SPTR)op->subject, op->len, last, PCRE2_NOTEMPTY, md, NULL);
    }
    memcpy(out + o, op->subject + last, op->len - last);
    return o + op->len - last;
}

int main(int argc, char **argv)
{
    long iters = argc > 2 ? atol(argv[2]) : 200000;
    size_t sink = 0;
    struct timespec t0, t1;
    if (argc < 2 || load(argv[1]) != 0)
        return 1;
    md = pcre2_match_data_create(10, NULL);
    if (argc > 3 && strcmp(argv[3], "-v") == 0) {
        for (size_t i = 0; i < nops; i++) {
            size_t l = run(&ops[i]);
            if (ops[i].kind == 'M')
                printf("M %s\n", l ? "true" : "false");
            else
                printf("%c %.*s\n", ops[i].kind, (int)l, out);
        }
        return 0;
    }
    for (long k = 0; k < iters / 10; k++)
        for (size_t i = 0; i < nops; i++)
            sink += run(&ops[i]);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long k = 0; k < iters; k++)
        for (size_t i = 0; i < nops; i++)
            sink += run(&ops[i]);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double t = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
    printf("pcre2 jit: %zu regex ops, %ld requests, %.0f ns per request (wall) [%zu]\n", nops,
           iters, t / iters * 1e9, sink % 7);
    return 0;
}
