/* Column reader for Kineto traces (ddpdoctor/trace/fastscan.py loads it with ctypes).
 *
 * One pass over the JSON bytes of a trace object: every event of "traceEvents" is checked
 * against the types of trace/schema.py, and each complete event ("ph": "X") writes one row of
 * columns (ts, dur, string ids of cat and name, pid, tid, correlation, external id, collective
 * name, spans of "Input Dims" and "In msg nelems", string id of "dtype").  Strings are interned in a hash table: one id per distinct
 * spelling.  No Python API: the caller owns every buffer.
 *
 * Whenever the input is anything but plain, well-formed JSON of the schema's types (a float id,
 * a string correlation, an escaped key, a duplicate field, deep nesting, a number msgspec might
 * read differently, ...) the scan stops with KS_BAIL and the caller uses the msgspec path, so
 * results never depend on which path ran.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stddef.h>

#include "_kscan_lex.h"

/* set by hatch_build.py: a hash of this file and _kscan_lex.h, so that fastscan.py never uses
 * a library built from other sources (a checkout updated without a reinstall) */
#ifndef KS_SOURCE_ID
#define KS_SOURCE_ID "unknown"
#endif
const char *ks_source_id(void) { return KS_SOURCE_ID; }

/* the layout of KScan (its size, then the offset of each field in declaration order), which
 * fastscan.py compares with its ctypes mirror before it uses this library */
#define KS_OFF(f) (int64_t)offsetof(KScan, f)
int64_t ks_layout(int64_t *out, int64_t cap) {
    const int64_t lay[] = {
        (int64_t)sizeof(KScan), KS_OFF(cap), KS_OFF(n), KS_OFF(ts), KS_OFF(dur), KS_OFF(cat), KS_OFF(name),
        KS_OFF(coll), KS_OFF(pid), KS_OFF(tid), KS_OFF(corr), KS_OFF(ext), KS_OFF(dims_off), KS_OFF(dims_len),
        KS_OFF(flags), KS_OFF(msg_off), KS_OFF(msg_len), KS_OFF(dtype), KS_OFF(strcap), KS_OFF(nstr),
        KS_OFF(str_off), KS_OFF(str_len), KS_OFF(str_esc), KS_OFF(htab), KS_OFF(hsize), KS_OFF(events_start),
        KS_OFF(events_end), KS_OFF(fail_at)};
    int64_t k = (int64_t)(sizeof lay / sizeof lay[0]);
    for (int64_t i = 0; i < k && i < cap; i++) out[i] = lay[i];
    return k;
}

typedef struct {
    int64_t corr, ext_a, ext_b, dims_off, msg_off;
    int32_t coll, dims_len, msg_len, dtype;
    int has_corr, has_ext_a, has_ext_b;
} Args;

/* an id field of args: int or null (a string or anything else bails) */
static int opt_int(Cur *c, int64_t *v, int *has) {
    if (is_null(c)) { *has = 0; return 0; }
    *has = 1;
    return int_value(c, v);
}

static int parse_args(Cur *c, Args *a) {
    unsigned seen = 0;
    c->p++;
    ws(c);
    if (c->p < c->e && *c->p == '}') { c->p++; return 0; }
    for (;;) {
        const uint8_t *s; int64_t len;
        if (key(c, &s, &len)) return -1;
        unsigned bit = 0;
        if (KEY_IS("correlation")) { bit = 1; if (opt_int(c, &a->corr, &a->has_corr)) return -1; }
        else if (KEY_IS("External id")) { bit = 2; if (opt_int(c, &a->ext_a, &a->has_ext_a)) return -1; }
        else if (KEY_IS("external id")) { bit = 4; if (opt_int(c, &a->ext_b, &a->has_ext_b)) return -1; }
        else if (KEY_IS("Collective name")) {
            bit = 8;
            if (is_null(c)) a->coll = -1;
            else if ((a->coll = str_id(c)) < 0) return -1;
        } else if (KEY_IS("Input Dims")) {
            bit = 16;
            const uint8_t *v = c->p;
            if (skip_value(c, 2)) return -1;
            a->dims_off = v - c->b;
            a->dims_len = (int32_t)(c->p - v);
        } else if (KEY_IS("In msg nelems")) {        /* int | float | str | None */
            bit = 32;
            if (is_null(c)) a->msg_len = -1;
            else {
                const uint8_t *v = c->p;
                if (c->p < c->e && (*c->p == '"' || *c->p == '-' || (*c->p >= '0' && *c->p <= '9'))) {
                    if (skip_value(c, 2)) return -1;
                } else FAIL(c);
                a->msg_off = v - c->b;
                a->msg_len = (int32_t)(c->p - v);
            }
        } else if (KEY_IS("dtype")) {                /* str | None */
            bit = 64;
            if (is_null(c)) a->dtype = -1;
            else if ((a->dtype = str_id(c)) < 0) return -1;
        } else if (skip_value(c, 2)) return -1;
        if (seen & bit) FAIL(c);
        seen |= bit;
        ws(c);
        if (c->p >= c->e) FAIL(c);
        if (*c->p == ',') { c->p++; ws(c); continue; }
        if (*c->p == '}') { c->p++; return 0; }
        FAIL(c);
    }
}

static int parse_event(Cur *c) {
    KScan *k = c->k;
    if (c->p >= c->e || *c->p != '{') FAIL(c);
    c->p++;
    ws(c);
    unsigned seen = 0;
    int is_x = 0;
    int32_t cat = -2, name = -2;        /* -2: absent (""), interned lazily */
    int64_t pid = 0, tid = 0;
    uint8_t fl = 0;
    double ts = 0.0, dur = 0.0;
    Args a = {.coll = -1, .dims_len = -1, .msg_len = -1, .dtype = -1};
    if (c->p < c->e && *c->p == '}') { c->p++; return 0; }
    for (;;) {
        const uint8_t *s; int64_t len;
        if (key(c, &s, &len)) return -1;
        unsigned bit = 0;
        if (KEY_IS("ph")) {
            bit = 1;
            const uint8_t *v; int64_t vl; int esc;
            if (c->p >= c->e || *c->p != '"') FAIL(c);
            if (str_span(c, &v, &vl, &esc)) return -1;
            if (esc) FAIL(c);
            is_x = vl == 1 && v[0] == 'X';
        } else if (KEY_IS("cat")) { bit = 2; if ((cat = str_id(c)) < 0) return -1; }
        else if (KEY_IS("name")) { bit = 4; if ((name = str_id(c)) < 0) return -1; }
        else if (KEY_IS("pid") || KEY_IS("tid")) {
            int is_pid = s[0] == 'p';
            bit = is_pid ? 8 : 16;
            int64_t v;
            if (c->p < c->e && *c->p == '"') {
                int id = str_id(c);
                if (id < 0) return -1;
                v = id;
                fl |= is_pid ? F_PID_STR : F_TID_STR;
            } else {
                if (int_value(c, &v)) return -1;
                fl &= is_pid ? ~F_PID_STR : ~F_TID_STR;
            }
            if (is_pid) pid = v; else tid = v;
        } else if (KEY_IS("ts")) { bit = 32; if (float_value(c, &ts)) return -1; }
        else if (KEY_IS("dur")) { bit = 64; if (float_value(c, &dur)) return -1; }
        else if (KEY_IS("args")) {
            bit = 128;
            if (!is_null(c)) {
                if (c->p >= c->e || *c->p != '{') FAIL(c);
                if (parse_args(c, &a)) return -1;
            }
        } else if (skip_value(c, 1)) return -1;
        if (seen & bit) FAIL(c);
        seen |= bit;
        ws(c);
        if (c->p >= c->e) FAIL(c);
        if (*c->p == ',') { c->p++; ws(c); continue; }
        if (*c->p == '}') { c->p++; break; }
        FAIL(c);
    }
    if (!is_x) return 0;
    if (k->n >= k->cap) { c->rc = KS_FULL; return -1; }
    if (cat == -2 || name == -2) {
        int id = intern(c, c->b, 0, 0);   /* "" */
        if (id < 0) return -1;
        if (cat == -2) cat = id;
        if (name == -2) name = id;
    }
    int64_t i = k->n++;
    k->ts[i] = ts;
    k->dur[i] = dur;
    k->cat[i] = cat;
    k->name[i] = name;
    k->pid[i] = pid;
    k->tid[i] = tid;
    k->corr[i] = a.corr;
    if (a.has_corr) fl |= F_CORR;
    k->ext[i] = a.has_ext_a ? a.ext_a : a.ext_b;
    if (a.has_ext_a || a.has_ext_b) fl |= F_EXT;
    k->coll[i] = a.coll;
    k->dims_off[i] = a.dims_off;
    k->dims_len[i] = a.dims_len;
    k->flags[i] = fl;
    k->msg_off[i] = a.msg_off;
    k->msg_len[i] = a.msg_len;
    k->dtype[i] = a.dtype;
    return 0;
}

static int parse_events(Cur *c) {
    if (c->p >= c->e || *c->p != '[') FAIL(c);
    c->k->events_start = c->p - c->b;
    c->p++;
    ws(c);
    if (c->p < c->e && *c->p == ']') { c->p++; c->k->events_end = c->p - c->b; return 0; }
    for (;;) {
        if (parse_event(c)) return -1;
        ws(c);
        if (c->p >= c->e) FAIL(c);
        if (*c->p == ',') { c->p++; ws(c); continue; }
        if (*c->p == ']') { c->p++; c->k->events_end = c->p - c->b; return 0; }
        FAIL(c);
    }
}

/* the top-level object: "traceEvents" is scanned, every other value only skipped (the caller
 * decodes the document without the events with msgspec, which checks the rest) */
int ks_scan(const uint8_t *buf, int64_t size, KScan *k) {
    Cur c = {buf, buf, buf + size, k, KS_OK};
    int found = 0;
    k->n = 0; k->nstr = 0; k->events_start = k->events_end = -1; k->fail_at = -1;
    ws(&c);
    if (c.p >= c.e || *c.p != '{') { k->fail_at = 0; return KS_BAIL; }
    c.p++;
    ws(&c);
    if (c.p < c.e && *c.p == '}') { k->fail_at = 0; return KS_BAIL; }
    for (;;) {
        const uint8_t *s; int64_t len;
        if (key(&c, &s, &len)) return c.rc;
        if (KEY_IS("traceEvents")) {
            if (found) { k->fail_at = c.p - c.b; return KS_BAIL; }
            found = 1;
            if (parse_events(&c)) return c.rc;
        } else if (skip_value(&c, 1)) return c.rc;
        ws(&c);
        if (c.p >= c.e) { k->fail_at = c.p - c.b; return KS_BAIL; }
        if (*c.p == ',') { c.p++; ws(&c); continue; }
        if (*c.p == '}') { c.p++; break; }
        k->fail_at = c.p - c.b;
        return KS_BAIL;
    }
    ws(&c);
    if (c.p != c.e || !found) { k->fail_at = c.p - c.b; return KS_BAIL; }
    return KS_OK;
}

/* ks_scan on a memory-mapped file: a file truncated while it is scanned raises SIGBUS on the
 * pages past its new end; the scan then ends with KS_BAIL (the caller reads the file the usual
 * way) instead of the process.  The handler is installed for the scans in flight only. */
static __thread sigjmp_buf *ks_jmp;
static struct sigaction ks_old_bus;
static int ks_guards;
static pthread_mutex_t ks_lock = PTHREAD_MUTEX_INITIALIZER;

static void ks_on_bus(int sig, siginfo_t *si, void *ctx) {
    (void)si; (void)ctx;
    if (ks_jmp) siglongjmp(*ks_jmp, 1);
    sigaction(sig, &ks_old_bus, NULL);          /* not a scan's: what was there before */
    raise(sig);
}

int ks_scan_mapped(const uint8_t *buf, int64_t size, KScan *k) {
    pthread_mutex_lock(&ks_lock);
    if (ks_guards++ == 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = ks_on_bus;
        sa.sa_flags = SA_SIGINFO | SA_NODEFER;
        sigemptyset(&sa.sa_mask);
        if (sigaction(SIGBUS, &sa, &ks_old_bus) != 0) {
            ks_guards--;
            pthread_mutex_unlock(&ks_lock);
            return KS_BAIL;
        }
    }
    pthread_mutex_unlock(&ks_lock);
    sigjmp_buf jb;
    volatile int rc = KS_BAIL;
    if (sigsetjmp(jb, 1) == 0) {
        ks_jmp = &jb;
        rc = ks_scan(buf, size, k);
    } else {
        k->fail_at = -2;
    }
    ks_jmp = NULL;
    pthread_mutex_lock(&ks_lock);
    if (--ks_guards == 0) sigaction(SIGBUS, &ks_old_bus, NULL);
    pthread_mutex_unlock(&ks_lock);
    return rc;
}
