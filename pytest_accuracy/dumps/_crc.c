/* CRC-32 of a tensor file's member, as zlib.crc32 computes it: the optional fast path of
 * pytest_accuracy.dumps.ptzip's CRC check.
 *
 * zlib.crc32 (the referee and the fallback) takes ~185 us per 0.6 MB tensor file on the
 * machines this was measured on: a third of reading a tensor.  Where the processor has
 * carry-less multiplication (x86-64 PCLMULQDQ, checked at run time), 16-byte blocks are
 * folded with it: the method of Gopal et al., "Fast CRC Computation for Generic
 * Polynomials Using PCLMULQDQ Instruction" (Intel, 2009), with the bit-reflected
 * constants of the CRC-32 polynomial given there (the same as the Linux kernel's and
 * Chromium's zlib).  The bytes around the blocks, and processors without it, use the
 * byte-wise table.  The GIL is released for large buffers.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stddef.h>
#include <stdint.h>

#define RELEASE_GIL_FROM 4096 /* bytes */

static uint32_t table[256];

static void make_table(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        table[n] = c;
    }
}

/* `c` is the register (the CRC with its bits inverted), as in zlib's inner loops. */
static uint32_t bytewise(uint32_t c, const unsigned char *p, size_t n) {
    while (n--)
        c = table[(c ^ *p++) & 0xff] ^ (c >> 8);
    return c;
}

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#include <immintrin.h>
#define HAVE_CLMUL_PATH 1
#define TARGET __attribute__((target("pclmul,sse4.1")))

/* The register after `len` bytes: `len` a multiple of 16, at least 64. */
TARGET static uint32_t folded(uint32_t c, const unsigned char *buf, size_t len) {
    const __m128i k1k2 = _mm_set_epi64x(0x01c6e41596LL, 0x0154442bd4LL);
    const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009eLL, 0x01751997d0LL);
    const __m128i k5k0 = _mm_set_epi64x(0, 0x0163cd6124LL);
    const __m128i poly = _mm_set_epi64x(0x01f7011641LL, 0x01db710641LL);
    const __m128i low32 = _mm_setr_epi32(~0, 0, ~0, 0);
    __m128i x1 = _mm_loadu_si128((const __m128i *)(buf + 0x00));
    __m128i x2 = _mm_loadu_si128((const __m128i *)(buf + 0x10));
    __m128i x3 = _mm_loadu_si128((const __m128i *)(buf + 0x20));
    __m128i x4 = _mm_loadu_si128((const __m128i *)(buf + 0x30));
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)c));
    buf += 64;
    len -= 64;
    while (len >= 64) { /* four 16-byte lanes folded 64 bytes ahead */
        __m128i h1 = _mm_clmulepi64_si128(x1, k1k2, 0x11), l1 = _mm_clmulepi64_si128(x1, k1k2, 0x00);
        __m128i h2 = _mm_clmulepi64_si128(x2, k1k2, 0x11), l2 = _mm_clmulepi64_si128(x2, k1k2, 0x00);
        __m128i h3 = _mm_clmulepi64_si128(x3, k1k2, 0x11), l3 = _mm_clmulepi64_si128(x3, k1k2, 0x00);
        __m128i h4 = _mm_clmulepi64_si128(x4, k1k2, 0x11), l4 = _mm_clmulepi64_si128(x4, k1k2, 0x00);
        x1 = _mm_xor_si128(_mm_xor_si128(h1, l1), _mm_loadu_si128((const __m128i *)(buf + 0x00)));
        x2 = _mm_xor_si128(_mm_xor_si128(h2, l2), _mm_loadu_si128((const __m128i *)(buf + 0x10)));
        x3 = _mm_xor_si128(_mm_xor_si128(h3, l3), _mm_loadu_si128((const __m128i *)(buf + 0x20)));
        x4 = _mm_xor_si128(_mm_xor_si128(h4, l4), _mm_loadu_si128((const __m128i *)(buf + 0x30)));
        buf += 64;
        len -= 64;
    }
    /* the four lanes into one, 16 bytes ahead each */
    x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, k3k4, 0x11),
                                     _mm_clmulepi64_si128(x1, k3k4, 0x00)), x2);
    x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, k3k4, 0x11),
                                     _mm_clmulepi64_si128(x1, k3k4, 0x00)), x3);
    x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, k3k4, 0x11),
                                     _mm_clmulepi64_si128(x1, k3k4, 0x00)), x4);
    while (len >= 16) {
        x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, k3k4, 0x11),
                                         _mm_clmulepi64_si128(x1, k3k4, 0x00)),
                           _mm_loadu_si128((const __m128i *)buf));
        buf += 16;
        len -= 16;
    }
    /* 128 bits to 64 */
    __m128i x0 = _mm_clmulepi64_si128(x1, k3k4, 0x10);
    x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), x0);
    x0 = _mm_srli_si128(x1, 4);
    x1 = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(x1, low32), k5k0, 0x00), x0);
    /* Barrett reduction to 32 bits */
    x0 = _mm_clmulepi64_si128(_mm_and_si128(x1, low32), poly, 0x10);
    x0 = _mm_clmulepi64_si128(_mm_and_si128(x0, low32), poly, 0x00);
    return (uint32_t)_mm_extract_epi32(_mm_xor_si128(x1, x0), 1);
}

static int clmul_supported(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
}
#else
#define HAVE_CLMUL_PATH 0
static int clmul_supported(void) { return 0; }
#endif

static int use_clmul;

/* zlib.crc32(data, value); `clmul` 0 takes the byte-wise table even where it is there. */
static uint32_t crc32_of(uint32_t value, const unsigned char *p, size_t n, int clmul) {
    uint32_t c = ~value;
#if HAVE_CLMUL_PATH
    if (clmul && n >= 64) {
        size_t blocks = n & ~(size_t)15;
        c = folded(c, p, blocks);
        p += blocks;
        n -= blocks;
    }
#else
    (void)clmul;
#endif
    return ~bytewise(c, p, n);
}

PyDoc_STRVAR(crc32_doc,
"crc32(data, value=0, baseline=False) -> int\n\n"
"zlib.crc32(data, value) of a bytes-like object; ``baseline`` takes the byte-wise\n"
"table even where carry-less multiplication is there.");

static PyObject *crc32(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"data", "value", "baseline", NULL};
    Py_buffer view;
    unsigned int value = 0;
    int baseline = 0;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*|Ip:crc32", keywords, &view, &value,
                                     &baseline))
        return NULL;
    const unsigned char *p = (const unsigned char *)view.buf;
    size_t n = (size_t)view.len;
    int clmul = use_clmul && !baseline;
    uint32_t crc;
    if (n >= RELEASE_GIL_FROM) {
        Py_BEGIN_ALLOW_THREADS
        crc = crc32_of((uint32_t)value, p, n, clmul);
        Py_END_ALLOW_THREADS
    } else {
        crc = crc32_of((uint32_t)value, p, n, clmul);
    }
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(crc);
}

PyDoc_STRVAR(accelerated_doc,
"accelerated() -> bool\n\nWhether crc32 folds with carry-less multiplication here.");

static PyObject *accelerated(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    return PyBool_FromLong(use_clmul);
}

static PyMethodDef methods[] = {
    {"crc32", (PyCFunction)(void (*)(void))crc32, METH_VARARGS | METH_KEYWORDS, crc32_doc},
    {"accelerated", accelerated, METH_NOARGS, accelerated_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_crc", "CRC-32 as zlib computes it, folded with PCLMULQDQ.", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__crc(void) {
    make_table();
    use_clmul = clmul_supported();
    return PyModule_Create(&module);
}
