/* The hot loop of _metrics.c, included once per instruction set: SUFFIX names its
 * functions, TARGET is their target attribute (empty for the build's baseline).  Only the
 * instructions differ between the instances: every lane's operations and their order are
 * the same, hence every bit of the results. */

#undef WIDEN
#define WIDEN(type)                                  \
    do {                                             \
        const type *p = (const type *)src;           \
        for (Py_ssize_t i = 0; i < m; i++)           \
            out[i] = (double)p[i];                   \
    } while (0)

/* m elements of kind `kind` starting at src, as doubles in out. */
TARGET static void FN(widen)(const char *src, int kind, Py_ssize_t m, double *out) {
    switch (kind) {
    case K_F64: memcpy(out, src, (size_t)m * sizeof(double)); break;
    case K_F32: WIDEN(float); break;
    case K_I8: WIDEN(int8_t); break;
    case K_I16: WIDEN(int16_t); break;
    case K_I32: WIDEN(int32_t); break;
    case K_I64: WIDEN(int64_t); break;
    case K_U8: case K_BOOL: WIDEN(uint8_t); break;
    case K_U16: WIDEN(uint16_t); break;
    case K_U32: WIDEN(uint32_t); break;
    case K_U64: WIDEN(uint64_t); break;
    case K_F16: {
        const uint16_t *p = (const uint16_t *)src;
        for (Py_ssize_t i = 0; i < m; i++)
            out[i] = (double)half_table[p[i]];
        break;
    }
    default: { /* K_BF16: the upper half of a float32 */
        const uint16_t *p = (const uint16_t *)src;
        for (Py_ssize_t i = 0; i < m; i++) {
            uint32_t bits = (uint32_t)p[i] << 16;
            float f;
            memcpy(&f, &bits, sizeof f);
            out[i] = (double)f;
        }
    }
    }
}

#if HAVE_VECTORS
/* FOLD_ONE's arithmetic on VW lanes at once (GCC/Clang vector extensions); each lane's
 * operations and their order are FOLD_ONE's. */
typedef double FN(vd) __attribute__((vector_size(VW * 8)));
typedef int64_t FN(vi) __attribute__((vector_size(VW * 8)));
#define v4d FN(vd)
#define v4i FN(vi)

TARGET static Py_ssize_t FN(fold_vector)(State *s, const double *x, const double *y, Py_ssize_t m,
                              Py_ssize_t pos) {
    v4d nn[NV], bb[NV], nb[NV], dd[NV], mabs[NV], mrel[NV];
    v4i worst[NV], b3[NV], b5[NV], zinf[NV], fin[NV], at[NV];
    for (int h = 0; h < NV; h++) {
        LOAD(nn[h], s->part[0] + VW * h), LOAD(bb[h], s->part[1] + VW * h);
        LOAD(nb[h], s->part[2] + VW * h), LOAD(dd[h], s->part[3] + VW * h);
        LOAD(mabs[h], s->max_abs + VW * h), LOAD(mrel[h], s->max_rel + VW * h);
        LOAD(worst[h], s->worst + VW * h), LOAD(zinf[h], s->zero_inf + VW * h);
        v4i zero = {0};
        int64_t first[VW];
        for (int k = 0; k < VW; k++)
            first[k] = (int64_t)(pos + VW * h + k);
        LOAD(at[h], first);
        b3[h] = b5[h] = zero, fin[h] = zero - 1;
    }
    Py_ssize_t i = 0;
    for (; i + LANES <= m; i += LANES) {
        for (int h = 0; h < NV; h++) {
            v4d a, b;
            LOAD(a, x + i + VW * h), LOAD(b, y + i + VW * h);
            v4d d = a - b, ad = VABS(d), ab = VABS(b), r = ad / ab;
            nn[h] += a * a, bb[h] += b * b, nb[h] += a * b, dd[h] += d * d;
            v4i more = ad > mabs[h];
            mabs[h] = VSEL(more, ad, mabs[h]);
            worst[h] = (more & at[h]) | (~more & worst[h]);
            b3[h] -= (ad < 1e-3 * ab) | (ad == 0.0); /* a true comparison is -1 */
            b5[h] -= (ad < 5e-3 * ab) | (ad == 0.0);
            mrel[h] = VSEL((ab > 0.0) & (r > mrel[h]), r, mrel[h]);
            zinf[h] |= (ab == 0.0) & (ad > 0.0);
            fin[h] &= (VABS(a) <= DBL_MAX) & (ab <= DBL_MAX);
            at[h] += LANES;
        }
    }
    for (int h = 0; h < NV; h++) {
        memcpy(s->part[0] + VW * h, &nn[h], sizeof nn[h]);
        memcpy(s->part[1] + VW * h, &bb[h], sizeof bb[h]);
        memcpy(s->part[2] + VW * h, &nb[h], sizeof nb[h]);
        memcpy(s->part[3] + VW * h, &dd[h], sizeof dd[h]);
        memcpy(s->max_abs + VW * h, &mabs[h], sizeof mabs[h]);
        memcpy(s->max_rel + VW * h, &mrel[h], sizeof mrel[h]);
        memcpy(s->worst + VW * h, &worst[h], sizeof worst[h]);
        for (int k = 0; k < VW; k++) {
            s->below3[VW * h + k] += b3[h][k], s->below5[VW * h + k] += b5[h][k];
            s->zero_inf[VW * h + k] = zinf[h][k] != 0;
            s->finite[VW * h + k] &= fin[h][k] != 0;
        }
    }
    return i;
}
#undef v4d
#undef v4i
#else
TARGET static Py_ssize_t FN(fold_vector)(State *s, const double *x, const double *y, Py_ssize_t m,
                              Py_ssize_t pos) {
    (void)s, (void)x, (void)y, (void)m, (void)pos;
    return 0;
}
#endif

/* Fold m widened elements whose first has flat index pos (a multiple of LANES): element
 * pos+i goes into lane i % LANES.  0 when one of them is NaN/Inf. */
TARGET static int FN(fold_block)(State *s, const double *x, const double *y, Py_ssize_t m,
                      Py_ssize_t pos) {
    Py_ssize_t i = FN(fold_vector)(s, x, y, m, pos);
    for (; i < m; i++)
        FOLD_ONE(s, i % LANES, x[i], y[i], pos + i);
    int ok = 1;
    for (int j = 0; j < LANES; j++)
        ok &= s->finite[j] != 0;
    return ok;
}

/* The whole pass; 0 when a NaN/Inf was met (the caller then takes the masked path). */
TARGET static int FN(fold_all)(State *s, const char *n, int nk, const char *b, int bk, Py_ssize_t count) {
    double x[BLOCK], y[BLOCK];
    for (Py_ssize_t pos = 0; pos < count; pos += BLOCK) {
        Py_ssize_t m = count - pos < BLOCK ? count - pos : BLOCK;
        FN(widen)(n + pos * ITEMSIZE[nk], nk, m, x);
        FN(widen)(b + pos * ITEMSIZE[bk], bk, m, y);
        if (!FN(fold_block)(s, x, y, m, pos))
            return 0;
        if ((pos + m) % CHUNK == 0 || pos + m == count)
            end_chunk(s);
    }
    return 1;
}
