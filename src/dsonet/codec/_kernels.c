/* BitDelta's hot loops, fused so the floats are read once (see bitdelta.py and rotation.py).
 *
 * numpy can only run these as a chain of passes (subtract, compare, packbits, abs, reduce), each
 * writing a temporary; here one pass per row does all of them in registers.  The functions take
 * row-major float32 / uint32 buffers from Python, check their sizes, and release the GIL, so
 * Python threads can run chunks of one batch on every core.
 *
 * Conventions (the protocol's, fixed by bitdelta.py):
 *   bit k of word w of a group holds coordinate 32 w + k of that group; set = delta >= 0 (+1);
 *   words past the end of a group are zero-padded; scale = mean |delta| over the group, float32.
 *   Rotation R = (Q_m (x) H_a (x) H_c) D acts on each group; coordinate (j, p, q) -> index (j a + p) c + q.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- quantize */

static void quantize_row_scalar(const float *x, const float *base, Py_ssize_t d, Py_ssize_t g,
                                uint32_t *signs, float *scales)
{
    Py_ssize_t words = (g + 31) / 32;
    for (Py_ssize_t j = 0; j < d / g; j++) {
        float acc = 0.0f;
        for (Py_ssize_t w = 0; w < words; w++) {
            uint32_t word = 0;
            Py_ssize_t lo = j * g + 32 * w, n = g - 32 * w < 32 ? g - 32 * w : 32;
            for (Py_ssize_t k = 0; k < n; k++) {
                float v = base ? x[lo + k] - base[lo + k] : x[lo + k];
                acc += fabsf(v);
                word |= (uint32_t)(v >= 0.0f) << k;
            }
            signs[j * words + w] = word;
        }
        scales[j] = acc / (float)g;
    }
}

/* g a multiple of 32: 8 lanes at a time, movemask gives the 8 sign bits in little-endian order. */
__attribute__((target("avx2")))
static void quantize_row_avx2(const float *x, const float *base, Py_ssize_t d, Py_ssize_t g,
                              uint32_t *signs, float *scales)
{
    const __m256 zero = _mm256_setzero_ps();
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (Py_ssize_t j = 0; j < d / g; j++) {
        __m256 acc0 = zero, acc1 = zero;
        for (Py_ssize_t w = 0; w < g / 32; w++) {
            const Py_ssize_t lo = j * g + 32 * w;
            uint32_t word = 0;
            for (int b = 0; b < 4; b++) {
                __m256 v = _mm256_loadu_ps(x + lo + 8 * b);
                if (base)
                    v = _mm256_sub_ps(v, _mm256_loadu_ps(base + lo + 8 * b));
                word |= (uint32_t)_mm256_movemask_ps(_mm256_cmp_ps(v, zero, _CMP_GE_OQ)) << (8 * b);
                if (b & 1)
                    acc1 = _mm256_add_ps(acc1, _mm256_and_ps(v, abs_mask));
                else
                    acc0 = _mm256_add_ps(acc0, _mm256_and_ps(v, abs_mask));
            }
            signs[j * (g / 32) + w] = word;
        }
        float lanes[8];
        _mm256_storeu_ps(lanes, _mm256_add_ps(acc0, acc1));
        scales[j] = (lanes[0] + lanes[1] + lanes[2] + lanes[3] + lanes[4] + lanes[5] + lanes[6] + lanes[7]) / (float)g;
    }
}

static int have_avx2;

/* ------------------------------------------------------------- dequantize */

__attribute__((target_clones("avx2", "default")))
static void dequantize_row(const uint32_t *signs, const float *scales, const float *base, Py_ssize_t d,
                           Py_ssize_t g, float *out)
{
    Py_ssize_t words = (g + 31) / 32;
    for (Py_ssize_t j = 0; j < d / g; j++) {
        const float a = scales[j];
        for (Py_ssize_t w = 0; w < words; w++) {
            const uint32_t word = signs[j * words + w];
            Py_ssize_t lo = j * g + 32 * w, n = g - 32 * w < 32 ? g - 32 * w : 32;
            if (base)
                for (Py_ssize_t k = 0; k < n; k++)
                    out[lo + k] = base[lo + k] + ((word >> k) & 1u ? a : -a);
            else
                for (Py_ssize_t k = 0; k < n; k++)
                    out[lo + k] = (word >> k) & 1u ? a : -a;
        }
    }
}

/* --------------------------------------------------------------- rotation */

/* In-place unnormalised Walsh-Hadamard transform of length n (a power of two): H_n = H_2^(x)k. */
static void fwht_scalar(float *x, Py_ssize_t n)
{
    for (Py_ssize_t h = 1; h < n; h *= 2)
        for (Py_ssize_t i = 0; i < n; i += 2 * h)
            for (Py_ssize_t k = i; k < i + h; k++) {
                float u = x[k], v = x[k + h];
                x[k] = u + v;
                x[k + h] = u - v;
            }
}

/* n >= 8: the three stages inside each 8-lane register as permute + signed add (multiplying by
 * +-1 is exact, so this is bit-for-bit the scalar butterfly), then whole-register butterflies. */
__attribute__((target("avx2")))
static void fwht_avx2(float *x, Py_ssize_t n)
{
    const __m256 s1 = _mm256_setr_ps(1, -1, 1, -1, 1, -1, 1, -1);
    const __m256 s2 = _mm256_setr_ps(1, 1, -1, -1, 1, 1, -1, -1);
    const __m256 s4 = _mm256_setr_ps(1, 1, 1, 1, -1, -1, -1, -1);
    for (Py_ssize_t k = 0; k < n; k += 8) {
        __m256 v = _mm256_loadu_ps(x + k);
        v = _mm256_add_ps(_mm256_permute_ps(v, 0xB1), _mm256_mul_ps(v, s1));
        v = _mm256_add_ps(_mm256_permute_ps(v, 0x4E), _mm256_mul_ps(v, s2));
        v = _mm256_add_ps(_mm256_permute2f128_ps(v, v, 0x01), _mm256_mul_ps(v, s4));
        _mm256_storeu_ps(x + k, v);
    }
    Py_ssize_t h = 8;
    for (; 4 * h <= n; h *= 4) /* two stages per pass: half the loads and stores, same sums */
        for (Py_ssize_t i = 0; i < n; i += 4 * h)
            for (Py_ssize_t k = i; k < i + h; k += 8) {
                __m256 a = _mm256_loadu_ps(x + k), b = _mm256_loadu_ps(x + k + h);
                __m256 c = _mm256_loadu_ps(x + k + 2 * h), d = _mm256_loadu_ps(x + k + 3 * h);
                __m256 ab0 = _mm256_add_ps(a, b), ab1 = _mm256_sub_ps(a, b);
                __m256 cd0 = _mm256_add_ps(c, d), cd1 = _mm256_sub_ps(c, d);
                _mm256_storeu_ps(x + k, _mm256_add_ps(ab0, cd0));
                _mm256_storeu_ps(x + k + h, _mm256_add_ps(ab1, cd1));
                _mm256_storeu_ps(x + k + 2 * h, _mm256_sub_ps(ab0, cd0));
                _mm256_storeu_ps(x + k + 3 * h, _mm256_sub_ps(ab1, cd1));
            }
    for (; h < n; h *= 2)
        for (Py_ssize_t i = 0; i < n; i += 2 * h)
            for (Py_ssize_t k = i; k < i + h; k += 8) {
                __m256 u = _mm256_loadu_ps(x + k), v = _mm256_loadu_ps(x + k + h);
                _mm256_storeu_ps(x + k, _mm256_add_ps(u, v));
                _mm256_storeu_ps(x + k + h, _mm256_sub_ps(u, v));
            }
}

static void fwht(float *x, Py_ssize_t n)
{
    if (have_avx2 && n >= 8)
        fwht_avx2(x, n);
    else
        fwht_scalar(x, n);
}

/* w_j = sum_i q[i, j] z_i over m rows of length n; q is m x m row-major, or its transpose
 * (R applies Q: w_j = sum_i Q[j, i] z_i, so rotate passes transpose = 1 and unrotate 0). */
static void mix_scalar(const float *z, const float *q, int transpose, Py_ssize_t m, Py_ssize_t n, float *w)
{
    for (Py_ssize_t j = 0; j < m; j++)
        for (Py_ssize_t t = 0; t < n; t++) {
            float acc = 0.0f;
            for (Py_ssize_t i = 0; i < m; i++)
                acc += (transpose ? q[j * m + i] : q[i * m + j]) * z[i * n + t];
            w[j * n + t] = acc;
        }
}

/* n a multiple of 32: four 8-lane accumulators per output stripe, each stored once. */
__attribute__((target("avx2,fma")))
static void mix_avx2(const float *z, const float *q, int transpose, Py_ssize_t m, Py_ssize_t n, float *w)
{
    for (Py_ssize_t j = 0; j < m; j++)
        for (Py_ssize_t t = 0; t < n; t += 32) {
            __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            for (Py_ssize_t i = 0; i < m; i++) {
                const __m256 c = _mm256_set1_ps(transpose ? q[j * m + i] : q[i * m + j]);
                const float *zi = z + i * n + t;
                a0 = _mm256_fmadd_ps(c, _mm256_loadu_ps(zi), a0);
                a1 = _mm256_fmadd_ps(c, _mm256_loadu_ps(zi + 8), a1);
                a2 = _mm256_fmadd_ps(c, _mm256_loadu_ps(zi + 16), a2);
                a3 = _mm256_fmadd_ps(c, _mm256_loadu_ps(zi + 24), a3);
            }
            _mm256_storeu_ps(w + j * n + t, a0);
            _mm256_storeu_ps(w + j * n + t + 8, a1);
            _mm256_storeu_ps(w + j * n + t + 16, a2);
            _mm256_storeu_ps(w + j * n + t + 24, a3);
        }
}

static void mix(const float *z, const float *q, int transpose, Py_ssize_t m, Py_ssize_t n, float *w)
{
    if (have_avx2 && n % 32 == 0)
        mix_avx2(z, q, transpose, m, n, w);
    else
        mix_scalar(z, q, transpose, m, n, w);
}

typedef struct {
    Py_ssize_t m, a, c, g; /* g = m a c, the rotated block: a whole group */
    const float *dsigns;   /* (g,) random signs, D */
    const float *q;        /* (m, m) orthogonal */
} rotation_t;

/* y = R (x - base) for one block of g coordinates; work holds g floats. */
__attribute__((target_clones("avx2", "default")))
static void rotate_block(const rotation_t *r, const float *x, const float *base, float *y, float *work)
{
    const Py_ssize_t n = r->a * r->c;
    const float norm = 1.0f / sqrtf((float)n);
    float *z = r->m > 1 ? work : y;
    for (Py_ssize_t k = 0; k < r->g; k++)
        z[k] = (base ? x[k] - base[k] : x[k]) * r->dsigns[k] * norm;
    for (Py_ssize_t i = 0; i < r->m; i++)
        fwht(z + i * n, n);
    if (r->m > 1)
        mix(z, r->q, 1, r->m, n, y);
}

/* x = R^T y + base for one block; work holds g floats. The transform runs in work, and the
 * output is written once, in the final pass. */
__attribute__((target_clones("avx2", "default")))
static void unrotate_block(const rotation_t *r, const float *y, const float *base, float *x, float *work)
{
    const Py_ssize_t n = r->a * r->c;
    const float norm = 1.0f / sqrtf((float)n);
    if (r->m > 1)
        mix(y, r->q, 0, r->m, n, work);
    else
        memcpy(work, y, sizeof(float) * r->g);
    for (Py_ssize_t i = 0; i < r->m; i++)
        fwht(work + i * n, n);
    for (Py_ssize_t k = 0; k < r->g; k++)
        x[k] = work[k] * r->dsigns[k] * norm + (base ? base[k] : 0.0f);
}

/* ------------------------------------------------------ asymmetric scores */

/* out[i, j] = sum over the code bytes p of group j of table[p, code_i[p]]: the sum of the
 * query's coordinates where code i has a set bit, one lookup per byte (RaBitQ's fast scan).
 * The table is ~1 MB at d = 7680, so rows are taken in tiles and bytes in blocks: a block's
 * 64 KB of table is reused by every row of the tile while it is in cache. */
#define LUT_TILE_ROWS 256
#define LUT_BLOCK_BYTES 64

static void lut_tile(const float *table, const uint8_t *const *code, Py_ssize_t m, Py_ssize_t n_bytes,
                     Py_ssize_t groups, float *out)
{
    const Py_ssize_t per = n_bytes / groups;
    for (Py_ssize_t i = 0; i < m * groups; i++)
        out[i] = 0.0f;
    for (Py_ssize_t j = 0; j < groups; j++)
        for (Py_ssize_t p0 = j * per; p0 < (j + 1) * per; p0 += LUT_BLOCK_BYTES) {
            const Py_ssize_t p1 = p0 + LUT_BLOCK_BYTES < (j + 1) * per ? p0 + LUT_BLOCK_BYTES : (j + 1) * per;
            for (Py_ssize_t i = 0; i < m; i++) {
                const uint8_t *c = code[i];
                float acc0 = 0.0f, acc1 = 0.0f;
                Py_ssize_t p = p0;
                for (; p + 2 <= p1; p += 2) {
                    acc0 += table[p * 256 + c[p]];
                    acc1 += table[(p + 1) * 256 + c[p + 1]];
                }
                if (p < p1)
                    acc0 += table[p * 256 + c[p]];
                out[i * groups + j] += acc0 + acc1;
            }
        }
}

/* out[i] = sum_k q[k] * codes[i, k] over int8 codes: the coarse sketch's inner products. */
static void int8_dot_scalar(const int8_t *codes, const float *q, Py_ssize_t n, Py_ssize_t k, float *out)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        float acc = 0.0f;
        for (Py_ssize_t t = 0; t < k; t++)
            acc += q[t] * (float)codes[i * k + t];
        out[i] = acc;
    }
}

__attribute__((target("avx2,fma")))
static void int8_dot_avx2(const int8_t *codes, const float *q, Py_ssize_t n, Py_ssize_t k, float *out)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        __m256 acc = _mm256_setzero_ps();
        for (Py_ssize_t t = 0; t < k; t += 8) {
            __m128i b = _mm_loadl_epi64((const __m128i *)(codes + i * k + t));
            acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + t), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)), acc);
        }
        float lanes[8];
        _mm256_storeu_ps(lanes, acc);
        out[i] = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
    }
}

/* ------------------------------------------------- distance to a center */

/* out[i] = sum_j w[j] |x[i, j] - c[j]|: DeltaSoup's MAD score of every row in one read. */
static void weighted_l1_scalar(const float *x, const float *c, const float *w, Py_ssize_t n, Py_ssize_t d, float *out)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        float acc = 0.0f;
        for (Py_ssize_t j = 0; j < d; j++)
            acc += w[j] * fabsf(x[i * d + j] - c[j]);
        out[i] = acc;
    }
}

__attribute__((target("avx2,fma")))
static void weighted_l1_avx2(const float *x, const float *c, const float *w, Py_ssize_t n, Py_ssize_t d, float *out)
{
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (Py_ssize_t i = 0; i < n; i++) {
        const float *row = x + i * d;
        __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
        Py_ssize_t j = 0;
        for (; j + 16 <= d; j += 16) {
            __m256 a = _mm256_and_ps(_mm256_sub_ps(_mm256_loadu_ps(row + j), _mm256_loadu_ps(c + j)), abs_mask);
            __m256 b = _mm256_and_ps(_mm256_sub_ps(_mm256_loadu_ps(row + j + 8), _mm256_loadu_ps(c + j + 8)), abs_mask);
            acc0 = _mm256_fmadd_ps(a, _mm256_loadu_ps(w + j), acc0);
            acc1 = _mm256_fmadd_ps(b, _mm256_loadu_ps(w + j + 8), acc1);
        }
        float lanes[8], tail = 0.0f;
        for (; j < d; j++)
            tail += w[j] * fabsf(row[j] - c[j]);
        _mm256_storeu_ps(lanes, _mm256_add_ps(acc0, acc1));
        out[i] = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7])) + tail;
    }
}

/* ------------------------------------------------------- Python interface */

/* One array argument: what it must be, and the buffer once acquired. */
typedef struct {
    PyObject *obj;
    const char *name;
    Py_ssize_t count;    /* items expected; -1: any number (read back from view.len) */
    Py_ssize_t itemsize; /* bytes per item */
    int writable;
    int optional; /* None is allowed and gives a NULL buffer */
    Py_buffer view;
} array_arg;

static void release_arrays(array_arg *a, int n)
{
    for (int i = 0; i < n; i++)
        if (a[i].view.obj)
            PyBuffer_Release(&a[i].view);
}

/* Acquire every array as a C-contiguous buffer of the expected size, or release them all and
 * return -1 with an error naming the argument. */
static int acquire_arrays(array_arg *a, int n)
{
    for (int i = 0; i < n; i++) {
        a[i].view.obj = NULL;
        a[i].view.buf = NULL;
        if (a[i].optional && a[i].obj == Py_None)
            continue;
        int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (a[i].writable ? PyBUF_WRITABLE : 0);
        if (PyObject_GetBuffer(a[i].obj, &a[i].view, flags) < 0) {
            release_arrays(a, i);
            return -1;
        }
        Py_ssize_t want = a[i].count < 0 ? a[i].view.len / a[i].itemsize : a[i].count;
        if (a[i].view.itemsize != a[i].itemsize || a[i].view.len != want * a[i].itemsize) {
            PyErr_Format(PyExc_ValueError, "%s: expected %zd items of %zd bytes, got %zd bytes of %zd-byte items",
                         a[i].name, want, a[i].itemsize, a[i].view.len, a[i].view.itemsize);
            release_arrays(a, i + 1);
            return -1;
        }
    }
    return 0;
}

static int check_shape(Py_ssize_t rows, Py_ssize_t d, Py_ssize_t g)
{
    if (rows < 0 || d < 1 || g < 1 || d % g) {
        PyErr_Format(PyExc_ValueError, "bad shape: rows=%zd, dim=%zd, group_size=%zd", rows, d, g);
        return -1;
    }
    return 0;
}

static int check_matrix(Py_ssize_t n, Py_ssize_t k)
{
    if (n < 0 || k < 1) {
        PyErr_Format(PyExc_ValueError, "bad shape: %zd rows of %zd", n, k);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(quantize_doc, "quantize(x, base, rows, dim, group_size, signs, scales)\n\n"
                           "signs, scales <- BitDelta code of x - base (base may be None).");

static PyObject *py_quantize(PyObject *self, PyObject *args)
{
    Py_ssize_t rows, d, g;
    array_arg a[4] = {{.name = "x", .itemsize = 4}, {.name = "base", .itemsize = 4, .optional = 1},
                      {.name = "signs", .itemsize = 4, .writable = 1}, {.name = "scales", .itemsize = 4, .writable = 1}};
    if (!PyArg_ParseTuple(args, "OOnnnOO", &a[0].obj, &a[1].obj, &rows, &d, &g, &a[2].obj, &a[3].obj) ||
        check_shape(rows, d, g) < 0)
        return NULL;
    const Py_ssize_t words = (d / g) * ((g + 31) / 32);
    a[0].count = rows * d, a[1].count = d, a[2].count = rows * words, a[3].count = rows * (d / g);
    if (acquire_arrays(a, 4) < 0)
        return NULL;
    const float *x = a[0].view.buf, *base = a[1].view.buf;
    uint32_t *signs = a[2].view.buf;
    float *scales = a[3].view.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < rows; i++) {
        if (have_avx2 && g % 32 == 0)
            quantize_row_avx2(x + i * d, base, d, g, signs + i * words, scales + i * (d / g));
        else
            quantize_row_scalar(x + i * d, base, d, g, signs + i * words, scales + i * (d / g));
    }
    Py_END_ALLOW_THREADS
    release_arrays(a, 4);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(dequantize_doc, "dequantize(signs, scales, base, rows, dim, group_size, out)\n\n"
                             "out <- base + scale * sign for every coordinate (base may be None).");

static PyObject *py_dequantize(PyObject *self, PyObject *args)
{
    Py_ssize_t rows, d, g;
    array_arg a[4] = {{.name = "signs", .itemsize = 4}, {.name = "scales", .itemsize = 4},
                      {.name = "base", .itemsize = 4, .optional = 1}, {.name = "out", .itemsize = 4, .writable = 1}};
    if (!PyArg_ParseTuple(args, "OOOnnnO", &a[0].obj, &a[1].obj, &a[2].obj, &rows, &d, &g, &a[3].obj) ||
        check_shape(rows, d, g) < 0)
        return NULL;
    const Py_ssize_t words = (d / g) * ((g + 31) / 32);
    a[0].count = rows * words, a[1].count = rows * (d / g), a[2].count = d, a[3].count = rows * d;
    if (acquire_arrays(a, 4) < 0)
        return NULL;
    const uint32_t *signs = a[0].view.buf;
    const float *scales = a[1].view.buf, *base = a[2].view.buf;
    float *out = a[3].view.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < rows; i++)
        dequantize_row(signs + i * words, scales + i * (d / g), base, d, g, out + i * d);
    Py_END_ALLOW_THREADS
    release_arrays(a, 4);
    Py_RETURN_NONE;
}

/* Shared by rotate and unrotate: (x, base, rows, dim, m, a, c, dsigns, q, out); the rotation
 * acts on each block of g = m a c consecutive coordinates of every row. */
static PyObject *rotation_call(PyObject *args, int inverse)
{
    Py_ssize_t rows, d, m, ha, hc;
    array_arg a[5] = {{.name = "x", .itemsize = 4}, {.name = "base", .itemsize = 4, .optional = 1},
                      {.name = "dsigns", .itemsize = 4}, {.name = "q", .itemsize = 4},
                      {.name = "out", .itemsize = 4, .writable = 1}};
    if (!PyArg_ParseTuple(args, "OOnnnnnOOO", &a[0].obj, &a[1].obj, &rows, &d, &m, &ha, &hc, &a[2].obj, &a[3].obj,
                          &a[4].obj))
        return NULL;
    if (m < 1 || ha < 1 || hc < 1 || (ha & (ha - 1)) || (hc & (hc - 1))) {
        PyErr_Format(PyExc_ValueError, "bad rotation shape: m=%zd, a=%zd, c=%zd", m, ha, hc);
        return NULL;
    }
    const Py_ssize_t g = m * ha * hc;
    if (check_shape(rows, d, g) < 0)
        return NULL;
    a[0].count = rows * d, a[1].count = d, a[2].count = g, a[3].count = m * m, a[4].count = rows * d;
    if (acquire_arrays(a, 5) < 0)
        return NULL;
    float *work = malloc(sizeof(float) * g);
    if (!work) {
        release_arrays(a, 5);
        return PyErr_NoMemory();
    }
    rotation_t r = {m, ha, hc, g, a[2].view.buf, a[3].view.buf};
    const float *x = a[0].view.buf, *base = a[1].view.buf;
    float *out = a[4].view.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < rows * d; k += g) {
        const float *bk = base ? base + k % d : NULL;
        if (inverse)
            unrotate_block(&r, x + k, bk, out + k, work);
        else
            rotate_block(&r, x + k, bk, out + k, work);
    }
    Py_END_ALLOW_THREADS
    free(work);
    release_arrays(a, 5);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(rotate_doc, "rotate(x, base, rows, dim, m, a, c, dsigns, q, out)\n\n"
                         "out <- R (x - base) on every block of m*a*c coordinates of every row.");
PyDoc_STRVAR(unrotate_doc, "unrotate(y, base, rows, dim, m, a, c, dsigns, q, out)\n\n"
                           "out <- R^T y + base on every block of m*a*c coordinates of every row.");

static PyObject *py_rotate(PyObject *self, PyObject *args) { return rotation_call(args, 0); }
static PyObject *py_unrotate(PyObject *self, PyObject *args) { return rotation_call(args, 1); }

PyDoc_STRVAR(lut_doc, "lut_sums(table, codes, n, n_bytes, rows, groups, out)\n\n"
                     "out[r, j] <- sum of table[p, codes[rows[r], p]] over the bytes p of group j\n"
                     "(rows may be None: every one of the n codes).");

static PyObject *py_lut_sums(PyObject *self, PyObject *args)
{
    Py_ssize_t n, n_bytes, groups;
    array_arg a[4] = {{.name = "table", .itemsize = 4}, {.name = "codes", .itemsize = 1},
                      {.name = "rows", .itemsize = 8, .count = -1, .optional = 1},
                      {.name = "out", .itemsize = 4, .writable = 1}};
    if (!PyArg_ParseTuple(args, "OOnnOnO", &a[0].obj, &a[1].obj, &n, &n_bytes, &a[2].obj, &groups, &a[3].obj))
        return NULL;
    if (n < 0 || n_bytes < 1 || groups < 1 || n_bytes % groups) {
        PyErr_Format(PyExc_ValueError, "bad shape: n=%zd, n_bytes=%zd, groups=%zd", n, n_bytes, groups);
        return NULL;
    }
    a[0].count = n_bytes * 256, a[1].count = n * n_bytes;
    a[3].count = -1; /* checked below, once the number of rows is known */
    if (acquire_arrays(a, 4) < 0)
        return NULL;
    const int64_t *rows = a[2].view.buf;
    const Py_ssize_t m = rows ? a[2].view.len / 8 : n;
    if (rows && !strchr("lq", a[2].view.format[strlen(a[2].view.format) - 1])) {
        PyErr_Format(PyExc_TypeError, "rows: expected int64, got format '%s'", a[2].view.format);
        release_arrays(a, 4);
        return NULL;
    }
    for (Py_ssize_t i = 0; rows && i < m; i++)
        if (rows[i] < 0 || rows[i] >= n) {
            PyErr_Format(PyExc_IndexError, "rows: %lld is outside 0..%zd", (long long)rows[i], n - 1);
            release_arrays(a, 4);
            return NULL;
        }
    if (a[3].view.len != m * groups * 4) {
        PyErr_Format(PyExc_ValueError, "out: expected %zd floats, got %zd bytes", m * groups, a[3].view.len);
        release_arrays(a, 4);
        return NULL;
    }
    const float *table = a[0].view.buf;
    const uint8_t *codes = a[1].view.buf;
    float *out = a[3].view.buf;
    Py_BEGIN_ALLOW_THREADS
    const uint8_t *tile[LUT_TILE_ROWS];
    for (Py_ssize_t i0 = 0; i0 < m; i0 += LUT_TILE_ROWS) {
        const Py_ssize_t t = m - i0 < LUT_TILE_ROWS ? m - i0 : LUT_TILE_ROWS;
        for (Py_ssize_t i = 0; i < t; i++)
            tile[i] = codes + (rows ? rows[i0 + i] : i0 + i) * n_bytes;
        lut_tile(table, tile, t, n_bytes, groups, out + i0 * groups);
    }
    Py_END_ALLOW_THREADS
    release_arrays(a, 4);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(int8_doc, "int8_dot(codes, q, n, k, out)\n\nout[i] <- sum_t q[t] * codes[i, t] for int8 codes (n, k).");

static PyObject *py_int8_dot(PyObject *self, PyObject *args)
{
    Py_ssize_t n, k;
    array_arg a[3] = {{.name = "codes", .itemsize = 1}, {.name = "q", .itemsize = 4},
                      {.name = "out", .itemsize = 4, .writable = 1}};
    if (!PyArg_ParseTuple(args, "OOnnO", &a[0].obj, &a[1].obj, &n, &k, &a[2].obj) || check_matrix(n, k) < 0)
        return NULL;
    a[0].count = n * k, a[1].count = k, a[2].count = n;
    if (acquire_arrays(a, 3) < 0)
        return NULL;
    const int8_t *codes = a[0].view.buf;
    const float *q = a[1].view.buf;
    float *out = a[2].view.buf;
    Py_BEGIN_ALLOW_THREADS
    if (have_avx2 && k % 8 == 0)
        int8_dot_avx2(codes, q, n, k, out);
    else
        int8_dot_scalar(codes, q, n, k, out);
    Py_END_ALLOW_THREADS
    release_arrays(a, 3);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(weighted_l1_doc, "weighted_l1(x, center, weights, n, d, out)\n\nout[i] <- sum_j weights[j] * |x[i, j] - center[j]|.");

static PyObject *py_weighted_l1(PyObject *self, PyObject *args)
{
    Py_ssize_t n, d;
    array_arg a[4] = {{.name = "x", .itemsize = 4}, {.name = "center", .itemsize = 4},
                      {.name = "weights", .itemsize = 4}, {.name = "out", .itemsize = 4, .writable = 1}};
    if (!PyArg_ParseTuple(args, "OOOnnO", &a[0].obj, &a[1].obj, &a[2].obj, &n, &d, &a[3].obj) || check_matrix(n, d) < 0)
        return NULL;
    a[0].count = n * d, a[1].count = d, a[2].count = d, a[3].count = n;
    if (acquire_arrays(a, 4) < 0)
        return NULL;
    const float *x = a[0].view.buf, *c = a[1].view.buf, *w = a[2].view.buf;
    float *out = a[3].view.buf;
    Py_BEGIN_ALLOW_THREADS
    if (have_avx2)
        weighted_l1_avx2(x, c, w, n, d, out);
    else
        weighted_l1_scalar(x, c, w, n, d, out);
    Py_END_ALLOW_THREADS
    release_arrays(a, 4);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(simd_doc, "simd() -> str\n\nThe instruction set the kernels run on: 'avx2' or 'scalar'.");

static PyObject *py_simd(PyObject *self, PyObject *args) { return PyUnicode_FromString(have_avx2 ? "avx2" : "scalar"); }

static PyMethodDef methods[] = {
    {"quantize", py_quantize, METH_VARARGS, quantize_doc},
    {"dequantize", py_dequantize, METH_VARARGS, dequantize_doc},
    {"rotate", py_rotate, METH_VARARGS, rotate_doc},
    {"unrotate", py_unrotate, METH_VARARGS, unrotate_doc},
    {"lut_sums", py_lut_sums, METH_VARARGS, lut_doc},
    {"int8_dot", py_int8_dot, METH_VARARGS, int8_doc},
    {"weighted_l1", py_weighted_l1, METH_VARARGS, weighted_l1_doc},
    {"simd", py_simd, METH_NOARGS, simd_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kernels", "dsonet's C kernels: BitDelta, its rotation, the code index's scans, DeltaSoup's scores.", -1, methods};

PyMODINIT_FUNC PyInit__kernels(void)
{
    __builtin_cpu_init();
    /* DSONET_KERNELS_SCALAR=1 takes the portable paths, so tests can check them on any CPU */
    const char *scalar = getenv("DSONET_KERNELS_SCALAR");
    have_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && !(scalar && *scalar == '1');
    return PyModule_Create(&module);
}
