/* The lexer of _kscan.c (included by it: one translation unit, so the hot string and number
 * readers stay inline): the scan's state, whitespace, strings (checked like a strict JSON
 * decoder, interned by spelling), numbers (exactly rounded), values skipped with checks, keys.
 * Every irregularity FAILs: the scan bails and the caller uses the msgspec path. */
#ifndef KSCAN_LEX_H
#define KSCAN_LEX_H
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#define KS_OK 0
#define KS_BAIL 1
#define KS_FULL 2

#define F_PID_STR 1
#define F_TID_STR 2
#define F_CORR 4
#define F_EXT 8

typedef struct {
    /* rows (capacity cap) */
    int64_t cap, n;
    double *ts, *dur;
    int32_t *cat, *name, *coll;
    int64_t *pid, *tid, *corr, *ext, *dims_off;
    int32_t *dims_len;
    uint8_t *flags;
    int64_t *msg_off;                 /* span of args "In msg nelems" (msg_len -1: none) */
    int32_t *msg_len, *dtype;         /* dtype: string id of args "dtype", -1: none */
    /* interned strings (capacity strcap), hash table of hsize = 2^k slots (filled with -1) */
    int32_t strcap, nstr;
    int64_t *str_off;
    int32_t *str_len;
    uint8_t *str_esc;
    int32_t *htab;
    int64_t hsize;
    /* result */
    int64_t events_start, events_end, fail_at;
} KScan;

typedef struct {
    const uint8_t *b, *p, *e;
    KScan *k;
    int rc;
} Cur;

#define FAIL(c) do { if ((c)->rc == KS_OK) { (c)->rc = KS_BAIL; (c)->k->fail_at = (c)->p - (c)->b; } return -1; } while (0)

static inline void ws(Cur *c) {
    while (c->p < c->e && (*c->p == ' ' || *c->p == '\n' || *c->p == '\r' || *c->p == '\t')) c->p++;
}

static int utf8_ok(const uint8_t *s, const uint8_t *e) {
    while (s < e) {
        uint8_t x = *s;
        if (x < 0x80) { s++; continue; }
        int n; uint32_t cp;
        if (x >= 0xC2 && x <= 0xDF) { n = 1; cp = x & 0x1F; }
        else if (x >= 0xE0 && x <= 0xEF) { n = 2; cp = x & 0x0F; }
        else if (x >= 0xF0 && x <= 0xF4) { n = 3; cp = x & 0x07; }
        else return 0;
        if (e - s <= n) return 0;
        for (int i = 1; i <= n; i++) {
            if ((s[i] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (s[i] & 0x3F);
        }
        if ((n == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (n == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
            return 0;
        s += n + 1;
    }
    return 1;
}

static inline int hexd(uint8_t x) {
    return (x >= '0' && x <= '9') || (x >= 'a' && x <= 'f') || (x >= 'A' && x <= 'F');
}

#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

/* a byte of the word that is '"', '\\', a control character or not ASCII */
static inline uint64_t special(uint64_t w) {
    uint64_t q = w ^ (ONES * '"'), b = w ^ (ONES * '\\');
    return (((q - ONES) & ~q) | ((b - ONES) & ~b) | (w - ONES * 0x20) | w) & HIGHS;
}

/* at the opening quote; leaves c->p after the closing quote; body in [*s, *s + *len) */
static int str_span(Cur *c, const uint8_t **s, int64_t *len, int *esc) {
    const uint8_t *p = c->p + 1;
    int e = 0, hi = 0;
    for (;;) {
#ifdef __SSE2__
        while (p + 16 <= c->e) {              /* sixteen plain bytes at a time */
            __m128i v = _mm_loadu_si128((const __m128i *)p);
            __m128i m = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('"')),
                                                  _mm_cmpeq_epi8(v, _mm_set1_epi8('\\'))),
                                     _mm_cmplt_epi8(v, _mm_set1_epi8(0x20)));   /* signed: also >= 0x80 */
            int bits = _mm_movemask_epi8(m);
            if (bits) { p += __builtin_ctz((unsigned)bits); break; }
            p += 16;
        }
#endif
        while (p + 8 <= c->e) {               /* eight plain bytes at a time */
            uint64_t w;
            memcpy(&w, p, 8);
            if (special(w)) break;
            p += 8;
        }
        if (p >= c->e) FAIL(c);
        uint8_t x = *p;
        if (x == '"') break;
        if (x < 0x20) FAIL(c);
        if (x == '\\') {
            e = 1;
            if (p + 1 >= c->e) FAIL(c);
            uint8_t y = p[1];
            if (y == 'u') {
                if (p + 5 >= c->e || !hexd(p[2]) || !hexd(p[3]) || !hexd(p[4]) || !hexd(p[5])) FAIL(c);
                if ((p[2] == 'd' || p[2] == 'D') && strchr("89abcdefABCDEF", p[3])) FAIL(c);   /* surrogates */
                p += 6;
                continue;
            }
            if (!(y == '"' || y == '\\' || y == '/' || y == 'b' || y == 'f' || y == 'n' || y == 'r' || y == 't')) FAIL(c);
            p += 2;
            continue;
        }
        if (x >= 0x80) hi = 1;
        p++;
    }
    *s = c->p + 1;
    *len = p - *s;
    if (hi && !utf8_ok(*s, p)) FAIL(c);
    *esc = e;
    c->p = p + 1;
    return 0;
}

static inline uint64_t hash_bytes(const uint8_t *s, int64_t len) {
    uint64_t h = 1469598103934665603ULL ^ (uint64_t)len;
    int64_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        h = (h ^ w) * 0x9E3779B97F4A7C15ULL;
        h ^= h >> 29;
    }
    uint64_t w = 0;
    memcpy(&w, s + i, (size_t)(len - i));
    h = (h ^ w) * 0x9E3779B97F4A7C15ULL;
    return h ^ (h >> 32);
}

static int intern(Cur *c, const uint8_t *s, int64_t len, int esc) {
    KScan *k = c->k;
    uint64_t mask = (uint64_t)k->hsize - 1;
    uint64_t i = hash_bytes(s, len) & mask;
    for (;;) {
        int32_t id = k->htab[i];
        if (id < 0) break;
        if (k->str_len[id] == len && memcmp(c->b + k->str_off[id], s, (size_t)len) == 0) return id;
        i = (i + 1) & mask;
    }
    if (k->nstr >= k->strcap || len > 0x7fffffff) { c->rc = KS_FULL; k->fail_at = c->p - c->b; return -1; }
    int32_t id = k->nstr++;
    k->str_off[id] = s - c->b;
    k->str_len[id] = (int32_t)len;
    k->str_esc[id] = (uint8_t)esc;
    k->htab[i] = id;
    return id;
}

static int str_id(Cur *c) {
    const uint8_t *s; int64_t len; int esc;
    if (c->p >= c->e || *c->p != '"') FAIL(c);
    if (str_span(c, &s, &len, &esc)) return -1;
    return intern(c, s, len, esc);
}

/* a JSON number token: [p, end), whether it has a fraction or exponent */
static int num_token(Cur *c, const uint8_t **end, int *is_float) {
    const uint8_t *p = c->p, *e = c->e;
    *is_float = 0;
    if (p < e && *p == '-') p++;
    if (p >= e) FAIL(c);
    if (*p == '0') p++;
    else if (*p >= '1' && *p <= '9') { while (p < e && *p >= '0' && *p <= '9') p++; }
    else FAIL(c);
    if (p < e && *p == '.') {
        p++; *is_float = 1;
        if (p >= e || !(*p >= '0' && *p <= '9')) FAIL(c);
        while (p < e && *p >= '0' && *p <= '9') p++;
    }
    if (p < e && (*p == 'e' || *p == 'E')) {
        p++; *is_float = 1;
        if (p < e && (*p == '+' || *p == '-')) p++;
        if (p >= e || !(*p >= '0' && *p <= '9')) FAIL(c);
        while (p < e && *p >= '0' && *p <= '9') p++;
    }
    *end = p;
    return 0;
}

/* an integer literal of at most 18 digits (no fraction, no exponent) */
static int int_value(Cur *c, int64_t *out) {
    const uint8_t *end; int fl;
    if (num_token(c, &end, &fl)) return -1;
    if (fl) FAIL(c);
    const uint8_t *p = c->p;
    int neg = 0;
    if (*p == '-') { neg = 1; p++; }
    if (end - p > 18) FAIL(c);
    int64_t v = 0;
    for (; p < end; p++) v = v * 10 + (*p - '0');
    *out = neg ? -v : v;
    c->p = end;
    return 0;
}

static const double P10[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
                             1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* a long number: glibc's strtod, correctly rounded like msgspec and Python's float(); bails
 * when the token is very long or strtod does not read all of it (a locale's decimal comma) */
static int float_slow(Cur *c, const uint8_t *end, double *out) {
    char tmp[64];
    size_t len = (size_t)(end - c->p);
    if (len >= sizeof tmp) FAIL(c);
    memcpy(tmp, c->p, len);
    tmp[len] = 0;
    char *stop;
    double v = strtod(tmp, &stop);
    if (stop != tmp + len || v != v || v - v != 0) FAIL(c);
    *out = v;
    c->p = end;
    return 0;
}

/* a number as a double, exactly rounded: Clinger's fast path (mantissa below 2^53, power of ten
 * at most 22, both exact, one correctly rounded operation); anything else goes to strtod */
static int float_value(Cur *c, double *out) {
    const uint8_t *end; int fl;
    if (num_token(c, &end, &fl)) return -1;
    if (!fl && end - c->p > 18) FAIL(c);          /* a long int: msgspec's own conversion */
    const uint8_t *p = c->p;
    int neg = 0, digits = 0;
    if (*p == '-') { neg = 1; p++; }
    uint64_t m = 0;
    int64_t exp10 = 0;
    for (; p < end && *p >= '0' && *p <= '9'; p++) {
        if (m || *p != '0') digits++;
        m = m * 10 + (uint64_t)(*p - '0');
        if (digits > 17) return float_slow(c, end, out);
    }
    if (p < end && *p == '.') {
        for (p++; p < end && *p >= '0' && *p <= '9'; p++) {
            if (m || *p != '0') digits++;
            if (digits > 17) return float_slow(c, end, out);
            m = m * 10 + (uint64_t)(*p - '0');
            exp10--;
        }
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        int eneg = 0;
        if (*p == '+' || *p == '-') { eneg = *p == '-'; p++; }
        int64_t x = 0;
        for (; p < end; p++) { x = x * 10 + (*p - '0'); if (x > 1000) return float_slow(c, end, out); }
        exp10 += eneg ? -x : x;
    }
    if (m > (1ULL << 53)) return float_slow(c, end, out);
    double v = (double)m;
    if (m == 0) v = 0.0;
    else if (exp10 >= 0 && exp10 <= 22) v = v * P10[exp10];
    else if (exp10 < 0 && exp10 >= -22) v = v / P10[-exp10];
    else return float_slow(c, end, out);
    *out = (neg && (m || fl)) ? -v : v;       /* "-0" is the int 0, "-0.0" is -0.0 */
    c->p = end;
    return 0;
}

static int skip_value(Cur *c, int depth);

static int skip_container(Cur *c, int depth, uint8_t close) {
    if (depth > 64) FAIL(c);
    c->p++;
    ws(c);
    if (c->p < c->e && *c->p == close) { c->p++; return 0; }
    for (;;) {
        if (close == '}') {
            const uint8_t *s; int64_t len; int esc;
            if (c->p >= c->e || *c->p != '"') FAIL(c);
            if (str_span(c, &s, &len, &esc)) return -1;
            ws(c);
            if (c->p >= c->e || *c->p != ':') FAIL(c);
            c->p++;
            ws(c);
        }
        if (skip_value(c, depth + 1)) return -1;
        ws(c);
        if (c->p >= c->e) FAIL(c);
        if (*c->p == ',') { c->p++; ws(c); continue; }
        if (*c->p == close) { c->p++; return 0; }
        FAIL(c);
    }
}

static int lit(Cur *c, const char *w, size_t n) {
    if ((size_t)(c->e - c->p) < n || memcmp(c->p, w, n) != 0) FAIL(c);
    c->p += n;
    return 0;
}

static int skip_value(Cur *c, int depth) {
    if (c->p >= c->e) FAIL(c);
    uint8_t x = *c->p;
    if (x == '"') { const uint8_t *s; int64_t len; int esc; return str_span(c, &s, &len, &esc); }
    if (x == '{') return skip_container(c, depth, '}');
    if (x == '[') return skip_container(c, depth, ']');
    if (x == 't') return lit(c, "true", 4);
    if (x == 'f') return lit(c, "false", 5);
    if (x == 'n') return lit(c, "null", 4);
    const uint8_t *end; int fl;
    if (num_token(c, &end, &fl)) return -1;
    if (end - c->p > 24) FAIL(c);                /* long ints, huge exponents: msgspec's call */
    for (const uint8_t *q = c->p; q < end; q++)
        if ((*q == 'e' || *q == 'E') && end - q > 4) FAIL(c);
    c->p = end;
    return 0;
}

static inline int is_null(Cur *c) {
    if (c->e - c->p >= 4 && memcmp(c->p, "null", 4) == 0) { c->p += 4; return 1; }
    return 0;
}

/* key at the opening quote; leaves c->p after the colon. Escaped keys bail. */
static int key(Cur *c, const uint8_t **s, int64_t *len) {
    int esc;
    if (c->p >= c->e || *c->p != '"') FAIL(c);
    const uint8_t *q = c->p + 1;             /* short plain keys: a byte loop, no setup */
    while (q < c->e && *q != '"' && *q >= 0x20 && *q < 0x80 && *q != '\\') q++;
    if (q < c->e && *q == '"') {
        *s = c->p + 1;
        *len = q - *s;
        c->p = q + 1;
    } else {
        if (str_span(c, s, len, &esc)) return -1;
        if (esc) FAIL(c);
    }
    ws(c);
    if (c->p >= c->e || *c->p != ':') FAIL(c);
    c->p++;
    ws(c);
    return 0;
}

#define KEY_IS(lit_) (len == (int64_t)sizeof(lit_) - 1 && memcmp(s, lit_, sizeof(lit_) - 1) == 0)

#endif
