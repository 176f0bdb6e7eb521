/* One pass over a tensor pair: the optional C fast path of pytest_accuracy.compare.fold.
 *
 * fold() reads two equally long element buffers (float64/32/16, bfloat16, ints, bool),
 * widens each element to double and folds every metric's running value in that one
 * pass: the sums n*n, b*b, n*b, d*d (d = n - b), the largest |d| and its first index,
 * the largest |d|/|b|, and the counts of |d| < t*|b|.  No float64 copy of a tensor is
 * made.  The result is bit-for-bit the numpy referee's (fold.py): sums go into 8 lanes
 * (element i into lane i % 8) added in element order, restarted every CHUNK elements
 * and then added to the lane totals, which is exactly what numpy's axis-0 reduce of a
 * (CHUNK/8, 8) block does.  The GIL is released while the pass runs, so the compare's
 * read-ahead threads use every core.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* Sums must be plain IEEE double operations: no x87 extended precision, and no fused
 * multiply-add (setup.py passes -ffp-contract=off). */
#if FLT_EVAL_METHOD != 0
#error "the metric kernel needs FLT_EVAL_METHOD == 0 to match numpy bit for bit"
#endif

#define LANES 8
#define CHUNK 65536 /* elements per lane restart: fold.CHUNK */
#define BLOCK 512   /* elements widened at a time, so they are folded from L1 cache */

enum { K_F64, K_F32, K_F16, K_BF16, K_I8, K_I16, K_I32, K_I64, K_U8, K_U16, K_U32, K_U64,
       K_BOOL, K_COUNT };
static const int ITEMSIZE[K_COUNT] = {8, 4, 2, 2, 1, 2, 4, 8, 1, 2, 4, 8, 1};

static float half_table[65536]; /* every float16 bit pattern, widened exactly */

typedef struct {
    double total[4][LANES]; /* nn, bb, nb, dd */
    double part[4][LANES];  /* this chunk's lane sums */
    double max_abs[LANES], max_rel[LANES];
    int64_t worst[LANES], below3[LANES], below5[LANES];
    int64_t zero_inf[LANES]; /* some |d| > 0 where b == 0: the largest relative error is inf */
    int64_t finite[LANES];   /* 0 once a NaN/Inf was met */
} State;

static float half_to_float(unsigned h) {
    unsigned exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    float v;
    if (exp == 0)
        v = ldexpf((float)man, -24);
    else if (exp == 31)
        v = man ? NAN : INFINITY;
    else
        v = ldexpf((float)(man | 0x400), (int)exp - 25);
    return (h & 0x8000) ? -v : v;
}

/* One element into lane j of State s; `at` is its flat index.  Written without branches
 * so that compilers vectorize it where they can. */
#define FOLD_ONE(s, j, a_, b_, at)                                                         \
    do {                                                                                   \
        double a = (a_), b = (b_), d = a - b, ad = fabs(d), ab = fabs(b), r = ad / ab;     \
        s->part[0][j] += a * a;                                                            \
        s->part[1][j] += b * b;                                                            \
        s->part[2][j] += a * b;                                                            \
        s->part[3][j] += d * d;                                                            \
        /* strict: the first index of the largest wins, as with np.argmax */               \
        int more = ad > s->max_abs[j];                                                     \
        s->max_abs[j] = more ? ad : s->max_abs[j];                                         \
        s->worst[j] = more ? (int64_t)(at) : s->worst[j];                                  \
        s->below3[j] += (ad < 1e-3 * ab) | (ad == 0.0);                                    \
        s->below5[j] += (ad < 5e-3 * ab) | (ad == 0.0);                                    \
        /* r is inf or NaN where b == 0: never taken */                                    \
        s->max_rel[j] = ((ab > 0.0) & (r > s->max_rel[j])) ? r : s->max_rel[j];            \
        s->zero_inf[j] |= (ab == 0.0) & (ad > 0.0);                                        \
        s->finite[j] &= (fabs(a) <= DBL_MAX) & (ab <= DBL_MAX); /* false for NaN, Inf */   \
    } while (0)


#if defined(__GNUC__) || defined(__clang__)
#define HAVE_VECTORS 1
#define NV (LANES / VW) /* vectors per set of lanes; VW (lanes per vector) is per instance */
#define LOAD(dst, src) memcpy(&(dst), (src), sizeof(dst))
#define VSEL(mask, a, b) ((v4d)(((mask) & (v4i)(a)) | (~(mask) & (v4i)(b))))
#define VABS(x) ((v4d)((v4i)(x) & 0x7fffffffffffffffLL))
#else
#define HAVE_VECTORS 0
#endif

static void end_chunk(State *s) {
    for (int k = 0; k < 4; k++)
        for (int j = 0; j < LANES; j++) {
            s->total[k][j] += s->part[k][j];
            s->part[k][j] = 0.0;
        }
}

#define FN(name) name##_base
#define TARGET
#define VW 2 /* SSE2, the x86-64 baseline; elsewhere what the compiler makes of it */
#include "_metrics_loop.h"
#undef FN
#undef TARGET
#undef VW

/* x86-64 with GCC or Clang: the loop is also compiled for AVX2 and taken when the CPU has it
 * (4x faster than SSE2 here). */
#if HAVE_VECTORS && defined(__x86_64__)
#define HAVE_AVX2 1
#define FN(name) name##_avx2
#define TARGET __attribute__((target("avx2")))
#define VW 4
#include "_metrics_loop.h"
#undef FN
#undef TARGET
#undef VW
#else
#define HAVE_AVX2 0
#endif

/* The whole pass; 0 when a NaN/Inf was met (the caller then takes the masked path). */
static int fold_all(State *s, const char *n, int nk, const char *b, int bk, Py_ssize_t count,
                    int baseline) {
#if HAVE_AVX2
    if (!baseline && __builtin_cpu_supports("avx2"))
        return fold_all_avx2(s, n, nk, b, bk, count);
#endif
    (void)baseline;
    return fold_all_base(s, n, nk, b, bk, count);
}

static PyObject *result(const State *s, Py_ssize_t count) {
    PyObject *lanes = PyTuple_New(4 * LANES);
    if (lanes == NULL)
        return NULL;
    for (int k = 0; k < 4; k++)
        for (int j = 0; j < LANES; j++)
            PyTuple_SET_ITEM(lanes, k * LANES + j, PyFloat_FromDouble(s->total[k][j]));
    double max_abs = -1.0, max_rel = 0.0;
    Py_ssize_t worst = 0, below3 = 0, below5 = 0;
    for (int j = 0; j < LANES; j++) {
        /* ties between lanes: the smaller index, i.e. the first in the whole tensor */
        if (s->max_abs[j] > max_abs || (s->max_abs[j] == max_abs && s->worst[j] < worst)) {
            max_abs = s->max_abs[j];
            worst = s->worst[j];
        }
        if (s->max_rel[j] > max_rel)
            max_rel = s->max_rel[j];
        below3 += s->below3[j];
        below5 += s->below5[j];
    }
    for (int j = 0; j < LANES; j++)
        if (s->zero_inf[j])
            max_rel = INFINITY;
    (void)count;
    return Py_BuildValue("(Ndndnn)", lanes, max_abs, worst, max_rel, below3, below5);
}

static int check_kind(int kind, Py_buffer *buf, Py_ssize_t count, const char *which) {
    if (kind < 0 || kind >= K_COUNT) {
        PyErr_Format(PyExc_ValueError, "fold: unknown element kind %d for %s", kind, which);
        return 0;
    }
    if (count < 0 || buf->len / ITEMSIZE[kind] < count) {
        PyErr_Format(PyExc_ValueError, "fold: %s holds %zd bytes, %zd elements need more",
                     which, buf->len, count);
        return 0;
    }
    return 1;
}

PyDoc_STRVAR(fold_doc,
"fold(npu, npu_kind, bench, bench_kind, count, baseline=0, /)\n--\n\n"
"Fold count elements of two contiguous buffers; None when either holds NaN/Inf, else\n"
"(32 lane sums nn/bb/nb/dd, max_abs, worst, max_rel, below_1e-3, below_5e-3).\n"
"baseline=1 takes the baseline instruction set's loop even where AVX2 is there (tests).");

static PyObject *fold(PyObject *self, PyObject *args) {
    Py_buffer n, b;
    int nk, bk, baseline = 0, ok = 0;
    Py_ssize_t count;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*iy*in|i:fold", &n, &nk, &b, &bk, &count, &baseline))
        return NULL;
    PyObject *out = NULL;
    State *s = NULL;
    if (!check_kind(nk, &n, count, "npu") || !check_kind(bk, &b, count, "bench"))
        goto done;
    s = PyMem_Calloc(1, sizeof(State));
    if (s == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (int j = 0; j < LANES; j++)
        s->max_abs[j] = -1.0, s->finite[j] = 1;
    Py_BEGIN_ALLOW_THREADS
    ok = fold_all(s, (const char *)n.buf, nk, (const char *)b.buf, bk, count, baseline);
    Py_END_ALLOW_THREADS
    if (ok) {
        out = result(s, count);
    } else {
        out = Py_None;
        Py_INCREF(out);
    }
done:
    PyMem_Free(s);
    PyBuffer_Release(&n);
    PyBuffer_Release(&b);
    return out;
}

static PyMethodDef methods[] = {
    {"fold", fold, METH_VARARGS, fold_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_metrics", "C fast path for the metrics of a tensor pair.",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__metrics(void) {
    for (unsigned h = 0; h < 65536; h++)
        half_table[h] = half_to_float(h);
    PyObject *mod = PyModule_Create(&module);
    if (mod != NULL && (PyModule_AddIntConstant(mod, "LANES", LANES) < 0 ||
                        PyModule_AddIntConstant(mod, "HAVE_AVX2", HAVE_AVX2) < 0 ||
                        PyModule_AddIntConstant(mod, "CHUNK", CHUNK) < 0)) {
        Py_DECREF(mod);
        return NULL;
    }
    return mod;
}
