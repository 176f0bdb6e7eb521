/* One pass over a log's bytes: the optional C fast path of pytest_accuracy.logs.records.
 *
 * scan() finds the lines holding a format's record marker and reads every record
 * whose fields fit a layout learnt in Python (same separators, same key texts, values
 * that are plain numbers).  It never guesses: a line with the marker that does not
 * fit exactly is returned as "odd" and read by the pure-Python path, which is the
 * reference.  Numbers are parsed exactly as Python's float() parses them.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SSE2__) && defined(__GNUC__)
#include <emmintrin.h>
#define SIMD_SEPS 4 /* separators compared 16 bytes at a time (more: one byte at a time) */
#endif

#include <float.h>
/* Clinger's fast path needs plain double arithmetic (not x87's extended precision). */
#define FAST_PATH_OK (FLT_EVAL_METHOD == 0)

#define SEP 0x1f       /* what the layout's translate table maps separators to */
#define NUM_MAX 64     /* longest value text parsed here; longer ones go to Python */
#define MAX_TEXTS 64   /* missing-value and true-flag texts */

enum { KIND_SKIP = 0, KIND_KEY = 1, KIND_NUMBER = 2, KIND_FLAG = 3, KIND_DIGITS = 4 };
enum { CLOSE_LINE = 0, CLOSE_FIRST = 1, CLOSE_LAST = 2 };
/* flags: skip the spaces after the marker; a run of separators is one (like str.split);
 * a line with a second marker is odd (its format's regex finds two records there); read
 * records as pandas does where it is the referee: a record short of trailing fields fits
 * (pandas pads it), and so does one whose first field past the layout is empty. */
enum { SKIP_SPACES = 1, COLLAPSE = 2, ONCE = 4, SHORT_ROWS = 8 };

typedef struct {
    char *data;
    size_t len, cap;
} Buf;

typedef struct {
    const unsigned char *bytes;
    Py_ssize_t len;
    int plain; /* every byte maps to itself: the raw token can be compared with memcmp */
} Text;

typedef struct {
    const unsigned char *table; /* 256-byte translate table */
    unsigned char sep_bytes[256]; /* the bytes the table maps to SEP */
    int nsep;
    const unsigned char *seps;  /* raw separator byte after each token but the last */
    const unsigned char *kinds; /* KIND_* per token */
    Text *keys;                 /* exact translated key text per token (KIND_KEY) */
    Py_ssize_t ntok, nvals;
    Py_ssize_t last_key; /* a short record must reach this token (pandas pads with "") */
    int collapse, short_rows;
#ifdef SIMD_SEPS
    __m128i sep_vec[SIMD_SEPS]; /* each separator byte broadcast; unused slots repeat the first */
#endif
    Text na[MAX_TEXTS], truth[MAX_TEXTS];
    Py_ssize_t n_na, n_truth;
} Layout;

static const double POW10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                               1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                               1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

static int buf_put(Buf *b, const void *src, size_t n)
{
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : (size_t)1 << 16;
        while (cap < b->len + n)
            cap *= 2;
        char *p = realloc(b->data, cap);
        if (p == NULL)
            return -1;
        b->data = p;
        b->cap = cap;
    }
    memcpy(b->data + b->len, src, n);
    b->len += n;
    return 0;
}

static int is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

/* Last ``c`` in s[0:n] (memrchr is a GNU extension). */
static const unsigned char *last_byte(const unsigned char *s, unsigned char c, size_t n)
{
    while (n > 0)
        if (s[--n] == c)
            return s + n;
    return NULL;
}

/* First ``needle`` in s[0:n]: memmem (SIMD in glibc) where the C library has it. */
static const unsigned char *find(const unsigned char *s, size_t n, const char *needle, size_t m)
{
#if defined(_WIN32)
    const unsigned char *end = s + n;
    while ((size_t)(end - s) >= m) {
        const unsigned char *p = memchr(s, needle[0], (size_t)(end - s) - m + 1);
        if (p == NULL || memcmp(p, needle, m) == 0)
            return p;
        s = p + 1;
    }
    return NULL;
#else
    return memmem(s, n, needle, m);
#endif
}

static int same_text(const unsigned char *s, Py_ssize_t n, const Text *t)
{
    return n == t->len && memcmp(s, t->bytes, (size_t)n) == 0;
}

typedef struct {
    uint64_t mant; /* the first 19 significant digits */
    int sig;       /* significant digits seen */
    int exact;     /* mant holds them all */
} Digits;

/* Add the digits at s[*i:] to ``d``; returns how many there were. */
static int take_digits(const unsigned char *s, Py_ssize_t n, Py_ssize_t *i, Digits *d)
{
    int count = 0;
    for (; *i < n && is_digit(s[*i]); (*i)++, count++) {
        if (d->mant || s[*i] != '0')
            d->sig++;
        if (d->sig <= 19)
            d->mant = d->mant * 10 + (uint64_t)(s[*i] - '0');
        else
            d->exact = 0;
    }
    return count;
}

/* 1 and *out set: ``s`` is a decimal number (or inf / nan) that float() reads; 0 otherwise. */
static int parse_number(const unsigned char *s, Py_ssize_t n, double *out)
{
    Py_ssize_t i = 0;
    int neg = 0;
    if (i < n && (s[i] == '+' || s[i] == '-'))
        neg = s[i++] == '-';
    Digits d = {0, 0, 1};
    int frac = 0, digits = take_digits(s, n, &i, &d);
    if (i < n && s[i] == '.') {
        i++;
        frac = take_digits(s, n, &i, &d);
        digits += frac;
    }
    if (digits == 0) {
        /* inf / infinity / nan, any case: float() reads them; let it. */
        Py_ssize_t rest = n - i;
        if (rest != 3 && rest != 8)
            return 0;
        for (Py_ssize_t j = i; j < n; j++)
            if (!((s[j] | 0x20) >= 'a' && (s[j] | 0x20) <= 'z'))
                return 0;
        d.exact = 0;
    }
    long exp10 = 0;
    if (digits && i < n && (s[i] == 'e' || s[i] == 'E')) {
        int eneg = 0, edigits = 0;
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-'))
            eneg = s[i++] == '-';
        for (; i < n && is_digit(s[i]); i++, edigits++)
            if (edigits < 6)
                exp10 = exp10 * 10 + (s[i] - '0');
        if (edigits == 0)
            return 0;
        if (edigits >= 6)
            d.exact = 0;
        exp10 = eneg ? -exp10 : exp10;
    }
    if (digits && i != n)
        return 0;
    exp10 -= frac;
    if (FAST_PATH_OK && d.exact && d.mant <= ((uint64_t)1 << 53) && exp10 >= -22 && exp10 <= 22) {
        /* Both operands exact: one IEEE operation rounds correctly (Clinger's fast path). */
        double v = (double)d.mant;
        v = exp10 >= 0 ? v * POW10[exp10] : v / POW10[-exp10];
        *out = neg ? -v : v;
        return 1;
    }
    char text[NUM_MAX + 1];
    char *end = NULL;
    memcpy(text, s, (size_t)n);
    text[n] = '\0';
    double v = PyOS_string_to_double(text, &end, NULL);
    if (v == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    if (end != text + n)
        return 0;
    *out = v;
    return 1;
}

static int is_space(unsigned char c) { return c == ' '; }

static int is_flag_pad(unsigned char c) { return c == ' ' || c == '[' || c == ']' || c == '\r'; }

/* The token translated, with the ``pad`` bytes around it stripped, into ``dst``. */
static Py_ssize_t clean(const Layout *L, const unsigned char *s, Py_ssize_t n,
                        unsigned char *dst, int (*pad)(unsigned char))
{
    Py_ssize_t a = 0, b = n;
    while (a < b && pad(L->table[s[a]]))
        a++;
    while (b > a && pad(L->table[s[b - 1]]))
        b--;
    if (b - a > NUM_MAX)
        return -1;
    for (Py_ssize_t i = a; i < b; i++)
        dst[i - a] = L->table[s[i]];
    return b - a;
}

/* Value of one kept token; 0 when it is no number, no missing marker (row goes to Python). */
static int read_token(const Layout *L, unsigned char kind, const unsigned char *s,
                      Py_ssize_t n, double *out)
{
    unsigned char text[NUM_MAX];
    if (kind == KIND_DIGITS) {
        /* a step number as the format's regex takes it (\d+): anything else is no record */
        Py_ssize_t len = clean(L, s, n, text, is_space);
        if (len < 1 || len > 18)
            return 0;
        int64_t value = 0;
        for (Py_ssize_t i = 0; i < len; i++) {
            if (!is_digit(text[i]))
                return 0;
            value = value * 10 + (text[i] - '0');
        }
        *out = (double)value;
        return 1;
    }
    if (kind == KIND_FLAG) {
        /* table.is_true: brackets, spaces and CR aside, lower case, one of TRUE_TEXTS */
        Py_ssize_t len = clean(L, s, n, text, is_flag_pad);
        *out = 0.0;
        if (len < 0)
            return 1;
        for (Py_ssize_t i = 0; i < len; i++)
            if (text[i] >= 'A' && text[i] <= 'Z')
                text[i] |= 0x20;
        for (Py_ssize_t t = 0; t < L->n_truth; t++)
            if (same_text(text, len, &L->truth[t]))
                *out = 1.0;
        return 1;
    }
    Py_ssize_t len = clean(L, s, n, text, is_space);
    if (len < 0)
        return 0;
    if (parse_number(text, len, out))
        return 1;
    for (Py_ssize_t t = 0; t < L->n_na; t++) {
        if (same_text(text, len, &L->na[t])) {
            *out = Py_NAN;
            return 1;
        }
    }
    return 0;
}

/* Offset of the first separator in s[p:n], or n. */
static Py_ssize_t next_sep(const Layout *L, const unsigned char *s, Py_ssize_t p, Py_ssize_t n)
{
#ifdef SIMD_SEPS
    if (L->nsep <= SIMD_SEPS) {
        const __m128i *sep = L->sep_vec;
        for (; p + 16 <= n; p += 16) {
            __m128i v = _mm_loadu_si128((const __m128i *)(s + p));
            __m128i hit = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, sep[0]), _mm_cmpeq_epi8(v, sep[1])),
                                       _mm_or_si128(_mm_cmpeq_epi8(v, sep[2]), _mm_cmpeq_epi8(v, sep[3])));
            int bits = _mm_movemask_epi8(hit);
            if (bits)
                return p + __builtin_ctz((unsigned)bits);
        }
    }
#endif
    while (p < n && L->table[s[p]] != SEP)
        p++;
    return p;
}

enum { FIT_NO = 0, FIT_YES = 1, FIT_VALUES = 2 };

/* FIT_YES and ``vals`` filled: the record has the layout's fields; FIT_VALUES: it has, but
 * a value is not a plain number (Python reads those); FIT_NO otherwise.  As in the pandas
 * path, a short record fits when all its keys are there: its absent values are missing. */
static int fit(const Layout *L, const unsigned char *s, Py_ssize_t n, double *vals)
{
    const unsigned char *T = L->table;
    Py_ssize_t tok = 0, p = 0, v = 0;
    int plain = 1;
    int odd_run = 0; /* collapse: a run is one separator byte then spaces ("loss:  3.2") */
    while (L->collapse && p < n && T[s[p]] == SEP)
        odd_run |= s[p++] != ' ';
    if (odd_run && p < n)
        return FIT_NO;
    for (;;) {
        Py_ssize_t start = p;
        p = next_sep(L, s, p, n); /* the token is s[start:p] */
        Py_ssize_t after = p < n ? p + 1 : n;
        for (; L->collapse && after < n && T[s[after]] == SEP; after++)
            odd_run |= s[after] != ' ';
        int more = p < n && !(L->collapse && after == n); /* another token follows */
        if (more && odd_run)
            return FIT_NO;
        if (tok == L->ntok) {
            /* pandas drops the fields past the layout when the first is empty ("1e-05:}") */
            if (L->short_rows && p == start)
                break;
            return FIT_NO;
        }
        if (more && tok < L->ntok - 1 && s[p] != L->seps[tok])
            return FIT_NO;
        if (more && tok == L->ntok - 1 && !L->short_rows)
            return FIT_NO;
        const unsigned char *tk = s + start;
        Py_ssize_t len = p - start;
        switch (L->kinds[tok]) {
        case KIND_KEY:
            if (len != L->keys[tok].len)
                return FIT_NO;
            if (L->keys[tok].plain && memcmp(tk, L->keys[tok].bytes, (size_t)len) == 0)
                break;
            for (Py_ssize_t i = 0; i < len; i++)
                if (T[tk[i]] != L->keys[tok].bytes[i])
                    return FIT_NO;
            break;
        case KIND_DIGITS:
            if (!read_token(L, KIND_DIGITS, tk, len, &vals[v++]))
                return FIT_NO;
            break;
        case KIND_NUMBER:
        case KIND_FLAG:
            plain &= read_token(L, L->kinds[tok], tk, len, &vals[v++]);
            break;
        default:
            break;
        }
        tok++;
        if (!more)
            break;
        p = after;
    }
    if (tok <= L->last_key || (tok < L->ntok && !L->short_rows))
        return FIT_NO;
    for (; tok < L->ntok; tok++) /* absent trailing fields: no value, no flag */
        if (L->kinds[tok] != KIND_SKIP && L->kinds[tok] != KIND_KEY)
            vals[v++] = L->kinds[tok] == KIND_FLAG ? 0.0 : Py_NAN;
    return plain ? FIT_YES : FIT_VALUES;
}

/* Where the record that starts at ``rs`` ends (exclusive), or -1: the line is odd. */
static Py_ssize_t record_end(const unsigned char *d, Py_ssize_t rs, Py_ssize_t le, int close)
{
    if (close == CLOSE_LINE)
        return le;
    if (close == CLOSE_LAST) {
        const unsigned char *q = last_byte(d + rs, '}', (size_t)(le - rs));
        return q == NULL ? -1 : q - d;
    }
    for (Py_ssize_t p = rs; p < le; p++) {
        if (d[p] == '}')
            return p;
        if (d[p] == '{')
            return -1;
    }
    return -1;
}

static int load_texts(PyObject *tuple, Text *out, Py_ssize_t *n)
{
    *n = PyTuple_GET_SIZE(tuple);
    if (*n > MAX_TEXTS) {
        PyErr_SetString(PyExc_ValueError, "too many texts");
        return -1;
    }
    for (Py_ssize_t i = 0; i < *n; i++) {
        PyObject *item = PyTuple_GET_ITEM(tuple, i);
        if (!PyBytes_Check(item)) {
            PyErr_SetString(PyExc_TypeError, "texts must be bytes");
            return -1;
        }
        out[i].bytes = (const unsigned char *)PyBytes_AS_STRING(item);
        out[i].len = PyBytes_GET_SIZE(item);
    }
    return 0;
}

static int load_layout(Layout *L, PyObject *table, PyObject *seps, PyObject *kinds,
                       PyObject *keys, PyObject *na, PyObject *truth)
{
    L->ntok = PyBytes_GET_SIZE(kinds);
    if (PyBytes_GET_SIZE(table) != 256 || L->ntok < 1 || PyBytes_GET_SIZE(seps) != L->ntok - 1 ||
        PyTuple_GET_SIZE(keys) != L->ntok) {
        PyErr_SetString(PyExc_ValueError, "inconsistent layout");
        return -1;
    }
    L->table = (const unsigned char *)PyBytes_AS_STRING(table);
    L->nsep = 0;
    for (int c = 0; c < 256; c++)
        if (L->table[c] == SEP)
            L->sep_bytes[L->nsep++] = (unsigned char)c;
    if (L->nsep == 0) {
        PyErr_SetString(PyExc_ValueError, "the table maps no byte to the separator");
        return -1;
    }
#ifdef SIMD_SEPS
    for (int k = 0; k < SIMD_SEPS; k++) /* built once here, not per token in next_sep */
        L->sep_vec[k] = _mm_set1_epi8((char)L->sep_bytes[k < L->nsep ? k : 0]);
#endif
    L->seps = (const unsigned char *)PyBytes_AS_STRING(seps);
    L->kinds = (const unsigned char *)PyBytes_AS_STRING(kinds);
    L->keys = PyMem_Calloc((size_t)L->ntok, sizeof(Text));
    if (L->keys == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    L->nvals = 0;
    L->last_key = -1;
    for (Py_ssize_t i = 0; i < L->ntok; i++) {
        PyObject *key = PyTuple_GET_ITEM(keys, i);
        if (!PyBytes_Check(key) || L->kinds[i] > KIND_DIGITS) {
            PyErr_SetString(PyExc_TypeError, "keys must be bytes, kinds 0-4");
            return -1;
        }
        L->keys[i].bytes = (const unsigned char *)PyBytes_AS_STRING(key);
        L->keys[i].len = PyBytes_GET_SIZE(key);
        L->keys[i].plain = 1;
        for (Py_ssize_t j = 0; j < L->keys[i].len; j++)
            L->keys[i].plain &= L->table[L->keys[i].bytes[j]] == L->keys[i].bytes[j];
        L->nvals += L->kinds[i] != KIND_SKIP && L->kinds[i] != KIND_KEY;
        if (L->kinds[i] == KIND_KEY)
            L->last_key = i;
    }
    if (load_texts(na, L->na, &L->n_na) < 0 || load_texts(truth, L->truth, &L->n_truth) < 0)
        return -1;
    return 0;
}

/* Column-major float64 values of ``n`` rows: column j is values[j * n : (j + 1) * n]. */
static PyObject *columns(const Buf *rows, Py_ssize_t n, Py_ssize_t k)
{
    PyObject *out = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(n * k * sizeof(double)));
    if (out == NULL)
        return NULL;
    double *dst = (double *)PyByteArray_AS_STRING(out);
    const double *src = (const double *)rows->data;
    for (Py_ssize_t i = 0; i < n; i++)
        for (Py_ssize_t j = 0; j < k; j++)
            dst[j * n + i] = src[i * k + j];
    return out;
}

static int scan_lines(const unsigned char *d, Py_ssize_t pos, Py_ssize_t end, const char *marker,
                      Py_ssize_t mlen, int close, int flags, const Layout *L, Buf *vals,
                      Buf *starts, Buf *odd, Buf *junk, double *row)
{
    while (pos < end) {
        const unsigned char *hit = find(d + pos, (size_t)(end - pos), marker, (size_t)mlen);
        if (hit == NULL)
            break;
        Py_ssize_t m = hit - d;
        const unsigned char *nl = last_byte(d + pos, '\n', (size_t)(m - pos));
        Py_ssize_t ls = nl == NULL ? pos : nl - d + 1;
        nl = memchr(d + m, '\n', (size_t)(end - m));
        Py_ssize_t le = nl == NULL ? end : nl - d;
        Py_ssize_t next = nl == NULL ? end : le + 1;
        Py_ssize_t rs = m + mlen;
        while ((flags & SKIP_SPACES) && rs < le && d[rs] == ' ')
            rs++;
        Py_ssize_t re = record_end(d, rs, le, close);
        int ok = re >= 0;
        /* A second record on the line (the regex would find it too): Python reads the line. */
        Py_ssize_t rest = close == CLOSE_LINE ? ((flags & ONCE) ? rs : le) : re + 1;
        if (ok && rest < le)
            ok = find(d + rest, (size_t)(le - rest), marker, (size_t)mlen) == NULL;
        int fits = ok ? fit(L, d + rs, re - rs, row) : FIT_NO;
        if (fits == FIT_YES) {
            int64_t at = rs;
            if (buf_put(vals, row, (size_t)L->nvals * sizeof(double)) < 0 ||
                buf_put(starts, &at, sizeof(at)) < 0)
                return -1;
        } else {
            int64_t span[2] = {ls, next};
            if (buf_put(fits == FIT_VALUES ? junk : odd, span, sizeof(span)) < 0)
                return -1;
        }
        pos = next;
    }
    return 0;
}

PyDoc_STRVAR(scan_doc,
"scan(data, start, end, marker, close, flags, table, seps, kinds, keys, na, truth)\n"
"-> (values: bytearray, starts: bytes, odd: bytes, junk: bytes)\n\n"
"Read the records of data[start:end] that fit the layout.  values holds float64\n"
"columns (one per kept token, column-major), starts the int64 offset of each record,\n"
"odd int64 (line start, next line start) pairs of marker lines that did not fit,\n"
"junk the same for lines that fit but have a value that is no plain number.");

static PyObject *scan(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t start, end, mlen;
    const char *marker;
    int close, flags;
    PyObject *table, *seps, *kinds, *keys, *na, *truth;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*nny#iiSSSO!O!O!", &view, &start, &end, &marker, &mlen,
                          &close, &flags, &table, &seps, &kinds, &PyTuple_Type,
                          &keys, &PyTuple_Type, &na, &PyTuple_Type, &truth))
        return NULL;
    Layout L = {0};
    Buf vals = {0}, starts = {0}, odd = {0}, junk = {0};
    PyObject *result = NULL;
    double *row = NULL;
    /* A marker never spans lines: with a newline in it, a record would start past its line end. */
    if (start < 0 || end > view.len || start > end || mlen < 1 || close < 0 || close > 2
        || memchr(marker, '\n', (size_t)mlen) != NULL) {
        PyErr_SetString(PyExc_ValueError, "bad range, marker or close");
        goto done;
    }
    if (load_layout(&L, table, seps, kinds, keys, na, truth) < 0)
        goto done;
    L.collapse = (flags & COLLAPSE) != 0;
    L.short_rows = (flags & SHORT_ROWS) != 0;
    row = PyMem_Calloc((size_t)L.nvals + 1, sizeof(double));
    if (row == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (scan_lines((const unsigned char *)view.buf, start, end, marker, mlen, close, flags, &L,
                   &vals, &starts, &odd, &junk, row) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t n = (Py_ssize_t)(starts.len / sizeof(int64_t));
    PyObject *values = columns(&vals, n, L.nvals);
    if (values != NULL)
        result = Py_BuildValue("Ny#y#y#", values, starts.data ? starts.data : "",
                               (Py_ssize_t)starts.len, odd.data ? odd.data : "",
                               (Py_ssize_t)odd.len, junk.data ? junk.data : "",
                               (Py_ssize_t)junk.len);
done:
    PyMem_Free(row);
    PyMem_Free(L.keys);
    free(vals.data);
    free(starts.data);
    free(odd.data);
    free(junk.data);
    PyBuffer_Release(&view);
    return result;
}

PyDoc_STRVAR(count_lines_doc,
"count_lines(data) -> int: lines in data, a last line without a newline included.");

/* bytes.count(b"\n") walks byte by byte; memchr is vectorised in the C library. */
static PyObject *count_lines(PyObject *self, PyObject *arg)
{
    Py_buffer view;
    (void)self;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const char *p = view.buf, *end = p + view.len;
    Py_ssize_t lines = 0;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        lines++;
        if (nl == NULL)
            break;
        p = nl + 1;
    }
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(lines);
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS, scan_doc},
    {"count_lines", count_lines, METH_O, count_lines_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_scan", "C fast path for reading step records of training logs.",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__scan(void) { return PyModule_Create(&module); }
