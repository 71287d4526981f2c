/* Fused loops of the training step that eager PyTorch runs as many passes over memory.
 *
 *   ranking_chunks scores a batch in PBG's default setup (ranking loss, batch negatives on
 *                  both sides) one chunk at a time: the chunk's matrix products, its loss
 *                  and both sides' embedding gradients, while its few hundred kilobytes of
 *                  scores and gradients stay in cache (eager torch streams the whole
 *                  batch's megabytes through memory once per operation);
 *   train_ranking  runs a Hogwild worker's whole share of a bucket in that setup, batch
 *                  after batch: gather, `ranking_chunks`' steps, row-wise Adagrad on the rows
 *                  and Adagrad on the shifts (global embeddings, translation), with no return
 *                  to Python between batches;
 *   ranking_loss   masks a side's negative scores, evaluates the ranking loss and writes its
 *                  gradients w.r.t. the positive and negative scores, in one pass (the
 *                  other setups' ranking loss);
 *   softmax_loss   the same for the softmax loss (the positive's cross-entropy among itself
 *                  and its negatives), row by row while a row of scores is in cache;
 *   row_adagrad    sums the gradients of repeated rows and applies row-wise Adagrad to an
 *                  embedding table and its accumulators, one pass per touched row;
 *   gather         copies the rows a batch names out of an embedding table, asking for the
 *                  (random) rows of a large table ahead of time;
 *   dense_adagrad  steps a small dense parameter (operators, global embeddings): one call
 *                  instead of five tensor operations whose overhead outweighs the work;
 *   shuffle_columns reorders a bucket's id columns in place by one random permutation
 *                  (Fisher-Yates), so that a shuffle holds neither an order nor a copy.
 *
 * Tensors arrive as addresses and element strides, grouped in structures with named fields
 * (Block, Positives, Batch, Side; `tessera.kernels` mirrors each as a ctypes.Structure and
 * checks dtypes and shapes), so this file needs no PyTorch headers and builds in a second;
 * the matrix products call the BLAS torch is built with, found at run time. The torch code
 * in `tessera.model.closed_form`, `tessera.model.losses` and `tessera.training.optimizers`
 * is the reference: the tests hold both equal.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* Hot loops get AVX-512 and AVX2 builds beside the baseline one; the loader picks what the
 * CPU has (the softmax rows run 1.8x faster with AVX-512 than with AVX2). */
#if defined(__x86_64__) && defined(__GNUC__)
#define VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define VECTOR_CLONES
#endif

/* A column block of one side's negatives in `ranking_loss` (mirrored by
 * `tessera.kernels.Block`): their scores [C, S, M], where their gradients go (same shape, may
 * be the same memory) and the keys [C, M] naming their entities, each with its element
 * strides along those axes. */
typedef struct {
    const float *scores;
    Py_ssize_t score_strides[3];
    float *grads;
    Py_ssize_t grad_strides[3];
    const int64_t *keys;
    Py_ssize_t key_strides[2];
    Py_ssize_t width; /* M */
} Block;

/* One side's positives in `ranking_loss` (mirrored by `tessera.kernels.Positives`): their
 * scores and keys [C, S] with element strides, the contiguous [C, S] that their gradients are
 * added to, and how many of the C * S are edges (the rest are padding). */
typedef struct {
    const float *scores;
    Py_ssize_t score_strides[2];
    const int64_t *keys;
    Py_ssize_t key_strides[2];
    float *grads;
    Py_ssize_t chunks, size, edges;
} Positives;

/* A negative counts when it scores above the positive's threshold (score - margin), is not
 * the positive's own entity and is not padding (negative key). Each counting pair adds its
 * violation to the loss, `weight` to the negative's gradient and -weight to the positive's. */
#define RANKING_PAIR(score, neg_key, threshold, pos_key, grad, loss, pos_grad)              \
    do {                                                                                     \
        float violation_ = (score) - (threshold);                                            \
        int counts_ = (violation_ > 0.0f) & ((neg_key) != (pos_key)) & ((neg_key) >= 0);     \
        (grad) = counts_ ? weight : 0.0f;                                                    \
        (loss) += counts_ ? violation_ : 0.0f;                                               \
        (pos_grad) -= counts_ ? weight : 0.0f;                                               \
    } while (0)

/* Chunk c of one block, its first `rows` positives (the rest are padding). The loop runs
 * along whichever axis is contiguous in memory, so that the compiler can vectorise it. */
VECTOR_CLONES
static double ranking_tile(const Block *b, Py_ssize_t c, Py_ssize_t rows,
                           const float *thresholds, const int64_t *pos_keys, float weight,
                           float *pos_grad) {
    /* Element strides of the scores (s*), their gradients (g*) and the keys (k*) along the
     * positives (*s) and the negatives (*m). */
    const Py_ssize_t ss = b->score_strides[1], sm = b->score_strides[2];
    const Py_ssize_t gs = b->grad_strides[1], gm = b->grad_strides[2], km = b->key_strides[1];
    double loss = 0.0;
    const float *scores = b->scores + c * b->score_strides[0];
    float *grads = b->grads + c * b->grad_strides[0];
    const int64_t *keys = b->keys + c * b->key_strides[0];
    if (sm == 1 && gm == 1 && km == 1) { /* along the negatives */
        for (Py_ssize_t s = 0; s < rows; s++) {
            const float *x = scores + s * ss;
            float *g = grads + s * gs;
            float threshold = thresholds[s], row_loss = 0.0f, row_grad = 0.0f;
            int64_t key = pos_keys[s];
            for (Py_ssize_t m = 0; m < b->width; m++)
                RANKING_PAIR(x[m], keys[m], threshold, key, g[m], row_loss, row_grad);
            loss += row_loss;
            pos_grad[s] += row_grad;
        }
    } else if (ss == 1 && gs == 1) { /* along the positives (a transposed block) */
        for (Py_ssize_t m = 0; m < b->width; m++) {
            const float *x = scores + m * sm;
            float *g = grads + m * gm;
            int64_t neg_key = keys[m * km];
            float column_loss = 0.0f;
            for (Py_ssize_t s = 0; s < rows; s++)
                RANKING_PAIR(x[s], neg_key, thresholds[s], pos_keys[s], g[s], column_loss,
                             pos_grad[s]);
            loss += column_loss;
        }
    } else {
        for (Py_ssize_t s = 0; s < rows; s++)
            for (Py_ssize_t m = 0; m < b->width; m++)
                RANKING_PAIR(scores[s * ss + m * sm], keys[m * km], thresholds[s],
                             pos_keys[s], grads[s * gs + m * gm], loss, pos_grad[s]);
    }
    return loss;
}

/* -1 with a TypeError set unless a kernel got the number of arguments it takes. */
static int expect_args(const char *name, Py_ssize_t nargs, Py_ssize_t expected) {
    if (nargs == expected) return 0;
    PyErr_Format(PyExc_TypeError, "%s takes %zd arguments", name, expected);
    return -1;
}

static int read_ints(PyObject *const *args, Py_ssize_t n, Py_ssize_t *out) {
    for (Py_ssize_t i = 0; i < n; i++) {
        out[i] = PyLong_AsSsize_t(args[i]);
        if (out[i] == -1 && PyErr_Occurred()) return -1;
    }
    return 0;
}

/* Copies the structure an argument holds (a ctypes.Structure of `tessera.kernels`, read
 * through the buffer protocol) to `out`; -1 with a TypeError set unless it is `size` bytes,
 * which catches a Python mirror out of step with this file. */
static int read_struct(PyObject *arg, const char *name, void *out, size_t size) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE)) return -1;
    int fits = view.len >= 0 && (size_t)view.len == size;
    if (fits)
        memcpy(out, view.buf, size);
    else
        PyErr_Format(PyExc_TypeError, "%s: expected a structure of %zu bytes, got %zd", name,
                     size, view.len);
    PyBuffer_Release(&view);
    return fits ? 0 : -1;
}

/* e^x for x <= 0, in a form the compiler vectorises (libm's expf is a call per element):
 * 2^n times a polynomial of the remainder (Cephes' expf coefficients, about 1 ulp); below
 * -87 (e^x under float's smallest normal) it returns 0. */
static inline float exp_nonpositive(float x) {
    int small = x < -87.0f;
    x = small ? -87.0f : x;
    float n = rintf(x * 1.44269504088896341f);
    float r = x - n * 0.693359375f + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    float y = p * r * r + r + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return small ? 0.0f : y * scale;
}

/* The largest of `start` and x[0..width), in LANES running maxima that the compiler turns
 * into vector instructions (a running maximum of one float is a chain it cannot). */
#define LANES 16
static inline float row_max(const float *x, Py_ssize_t width, float start) {
    float lanes[LANES];
    for (int l = 0; l < LANES; l++) lanes[l] = start;
    Py_ssize_t whole = width - width % LANES;
    for (Py_ssize_t m = 0; m < whole; m += LANES)
        for (int l = 0; l < LANES; l++) lanes[l] = x[m + l] > lanes[l] ? x[m + l] : lanes[l];
    for (Py_ssize_t m = whole; m < width; m++) lanes[0] = x[m] > lanes[0] ? x[m] : lanes[0];
    float largest = lanes[0];
    for (int l = 1; l < LANES; l++) largest = lanes[l] > largest ? lanes[l] : largest;
    return largest;
}

/* One row of `softmax_loss`: the loss of the positive `pos` among itself and the negatives
 * x[0..width) not masked (the positive's own key, or padding); x becomes their gradients. */
VECTOR_CLONES
static double softmax_row(float *x, const int64_t *keys, Py_ssize_t width, float pos,
                          int64_t pos_key, float *pos_grad) {
    for (Py_ssize_t m = 0; m < width; m++) {
        int counts = (keys[m] != pos_key) & (keys[m] >= 0);
        x[m] = counts ? x[m] : -INFINITY;
    }
    float shift = row_max(x, width, pos);
    float total = 0.0f;
    for (Py_ssize_t m = 0; m < width; m++) {
        x[m] = exp_nonpositive(x[m] - shift); /* 0 where masked (-inf) */
        total += x[m];
    }
    float pos_exp = exp_nonpositive(pos - shift);
    total += pos_exp;
    float scale = 1.0f / total;
    for (Py_ssize_t m = 0; m < width; m++) x[m] *= scale;
    *pos_grad += pos_exp * scale - 1.0f;
    return (double)logf(total) + shift - pos;
}

/* softmax_loss(scores, pos_scores, pos_keys, neg_keys, pos_grads, chunks, size, width,
 * edges), addresses of contiguous tensors: scores [chunks, size, width] (overwritten by their
 * gradients), pos_scores, pos_keys and pos_grads [chunks, size], neg_keys [chunks, width].
 * Returns the summed loss of the first `edges` rows; the padding rows get zero gradients. */
static PyObject *softmax_loss(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (expect_args("softmax_loss", nargs, 9)) return NULL;
    Py_ssize_t v[9];
    if (read_ints(args, 9, v)) return NULL;
    float *scores = (float *)v[0], *pos_grads = (float *)v[4];
    const float *pos_scores = (const float *)v[1];
    const int64_t *pos_keys = (const int64_t *)v[2], *neg_keys = (const int64_t *)v[3];
    Py_ssize_t chunks = v[5], size = v[6], width = v[7], edges = v[8];
    double loss = 0.0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t c = 0; c < chunks; c++)
        for (Py_ssize_t s = 0; s < size; s++) {
            Py_ssize_t row = c * size + s;
            float *x = scores + row * width;
            if (row < edges)
                loss += softmax_row(x, neg_keys + c * width, width, pos_scores[row],
                                    pos_keys[row], pos_grads + row);
            else
                memset(x, 0, sizeof(float) * width);
        }
    Py_END_ALLOW_THREADS
    return PyFloat_FromDouble(loss);
}

/* ranking_loss(margin, weight, positives, block[, block]): the ranking loss of one side's
 * negatives, given as one or two blocks of columns; writes their gradients and adds the
 * positives' to positives.grads. Padding rows (past positives.edges) get zero gradients. */
static PyObject *ranking_loss(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4 && nargs != 5) {
        PyErr_SetString(PyExc_TypeError,
                        "ranking_loss takes margin, weight, positives and one or two blocks");
        return NULL;
    }
    double margin = PyFloat_AsDouble(args[0]);
    double weight = PyFloat_AsDouble(args[1]);
    if (PyErr_Occurred()) return NULL;
    Positives pos;
    Block blocks[2];
    int num_blocks = (int)nargs - 3;
    if (read_struct(args[2], "positives", &pos, sizeof pos)) return NULL;
    for (int b = 0; b < num_blocks; b++)
        if (read_struct(args[3 + b], "block", &blocks[b], sizeof blocks[b])) return NULL;
    Py_ssize_t size = pos.size;
    float *thresholds = PyMem_RawMalloc(sizeof(float) * size);
    int64_t *pos_keys = PyMem_RawMalloc(sizeof(int64_t) * size);
    if (!thresholds || !pos_keys) {
        PyMem_RawFree(thresholds);
        PyMem_RawFree(pos_keys);
        return PyErr_NoMemory();
    }
    double loss = 0.0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t c = 0; c < pos.chunks; c++) {
        Py_ssize_t rows = pos.edges - c * size;
        rows = rows < 0 ? 0 : rows > size ? size : rows;
        for (Py_ssize_t s = 0; s < size; s++) {
            thresholds[s] = pos.scores[c * pos.score_strides[0] + s * pos.score_strides[1]]
                            - (float)margin;
            pos_keys[s] = pos.keys[c * pos.key_strides[0] + s * pos.key_strides[1]];
        }
        for (int b = 0; b < num_blocks; b++) {
            const Block *block = &blocks[b];
            loss += ranking_tile(block, c, rows, thresholds, pos_keys, (float)weight,
                                 pos.grads + c * size);
            for (Py_ssize_t s = rows; s < size; s++) /* padding */
                for (Py_ssize_t m = 0; m < block->width; m++)
                    block->grads[c * block->grad_strides[0] + s * block->grad_strides[1]
                                 + m * block->grad_strides[2]] = 0.0f;
        }
    }
    Py_END_ALLOW_THREADS
    PyMem_RawFree(thresholds);
    PyMem_RawFree(pos_keys);
    return PyFloat_FromDouble(loss * weight);
}

/* How many rows ahead the row loops ask for the table rows they will read or update: their
 * addresses are random, so without it every row would wait for memory. */
#define PREFETCH_ROWS 16

/* Asks for every 64-byte line of a row of `dim` floats; `rw` is 1 when it will be written
 * (a macro: the builtin wants its hint as a constant). */
#define PREFETCH_ROW(row, dim, rw) \
    for (Py_ssize_t line_ = 0; line_ < (dim); line_ += 16) __builtin_prefetch((row) + line_, (rw))

/* The distinct rows of one Adagrad step and where each first occurs: an open-addressing
 * table of at least twice as many slots as rows (a few hundred kilobytes for PBG's batches,
 * in cache), not one slot per table row (megabytes per worker for a large partition). */
typedef struct {
    int64_t *keys;   /* the row held in each slot; -1: empty */
    int32_t *first;  /* where that row first occurs in the step */
    int32_t *firsts; /* the first occurrences, in order */
    int bits;        /* 2^bits slots */
} RowSet;

/* `set` sized for steps of up to `count` rows; -1 if out of memory (members NULL). */
static int alloc_row_set(RowSet *set, Py_ssize_t count) {
    set->bits = 4;
    while (((Py_ssize_t)1 << set->bits) < 2 * count) set->bits++;
    size_t slots = (size_t)1 << set->bits;
    set->keys = PyMem_RawMalloc(sizeof(int64_t) * slots);
    set->first = PyMem_RawMalloc(sizeof(int32_t) * slots);
    set->firsts = PyMem_RawMalloc(sizeof(int32_t) * (count > 0 ? count : 1));
    return set->keys && set->first && set->firsts ? 0 : -1;
}

static void free_row_set(RowSet *set) {
    PyMem_RawFree(set->keys);
    PyMem_RawFree(set->first);
    PyMem_RawFree(set->firsts);
}

/* Sums the gradients of repeated rows into their first occurrence, then applies row-wise
 * Adagrad to each distinct row, in the order they first occur. `set` holds at least
 * `count` rows (`alloc_row_set`). */
VECTOR_CLONES
static void row_adagrad_step(float *table, Py_ssize_t dim, float *row_sum,
                             const int64_t *rows, Py_ssize_t count, float *grads, float lr,
                             float eps, const RowSet *set) {
    const size_t mask = ((size_t)1 << set->bits) - 1;
    memset(set->keys, 0xff, sizeof(int64_t) * (mask + 1)); /* all -1 */
    Py_ssize_t distinct = 0;
    for (Py_ssize_t k = 0; k < count; k++) {
        if (k + PREFETCH_ROWS < count) __builtin_prefetch(row_sum + rows[k + PREFETCH_ROWS], 1);
        const int64_t row = rows[k];
        size_t at = (size_t)(((uint64_t)row * 0x9E3779B97F4A7C15ull) >> (64 - set->bits));
        while (set->keys[at] != row && set->keys[at] != -1) at = (at + 1) & mask;
        if (set->keys[at] == -1) {
            set->keys[at] = row;
            set->first[at] = (int32_t)k;
            set->firsts[distinct++] = (int32_t)k;
            continue;
        }
        float *into = grads + set->first[at] * dim;
        const float *g = grads + k * dim;
        for (Py_ssize_t d = 0; d < dim; d++) into[d] += g[d];
    }
    for (Py_ssize_t j = 0; j < distinct; j++) {
        if (j + PREFETCH_ROWS < distinct)
            PREFETCH_ROW(table + rows[set->firsts[j + PREFETCH_ROWS]] * dim, dim, 1);
        const Py_ssize_t k = set->firsts[j];
        const int64_t row = rows[k];
        const float *g = grads + k * dim;
        float squares = 0.0f;
        for (Py_ssize_t d = 0; d < dim; d++) squares += g[d] * g[d];
        float delta = squares / (float)dim;
        /* Another worker may add to the shared sum meanwhile: reading it before adding our
         * own delta means a step never divides by less than its own squared gradient. */
        float local_sum = row_sum[row] + delta;
        row_sum[row] += delta;
        float step = -lr / (sqrtf(local_sum) + eps);
        float *target = table + row * dim;
        for (Py_ssize_t d = 0; d < dim; d++) target[d] += step * g[d];
    }
}

/* -1 with an IndexError set when a row id is outside [0, num_rows). */
static int check_rows(const int64_t *rows, Py_ssize_t count, Py_ssize_t num_rows) {
    for (Py_ssize_t k = 0; k < count; k++) {
        if (rows[k] < 0 || rows[k] >= num_rows) {
            PyErr_Format(PyExc_IndexError, "row id %lld outside the table's %zd rows",
                         (long long)rows[k], num_rows);
            return -1;
        }
    }
    return 0;
}

/* The learning rate and epsilon that end the optimizers' argument lists; -1 on error. */
static int read_lr_eps(PyObject *const *args, float *lr, float *eps) {
    double lr_value = PyFloat_AsDouble(args[0]);
    double eps_value = PyFloat_AsDouble(args[1]);
    if (PyErr_Occurred()) return -1;
    *lr = (float)lr_value;
    *eps = (float)eps_value;
    return 0;
}

/* row_adagrad(table, dim, row_sum, rows, count, grads, num_rows, lr, eps) */
static PyObject *row_adagrad(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (expect_args("row_adagrad", nargs, 9)) return NULL;
    Py_ssize_t v[7];
    float lr, eps;
    if (read_ints(args, 7, v) || read_lr_eps(args + 7, &lr, &eps)) return NULL;
    if (check_rows((const int64_t *)v[3], v[4], v[6])) return NULL;
    RowSet set;
    if (alloc_row_set(&set, v[4])) {
        free_row_set(&set);
        return PyErr_NoMemory();
    }
    Py_BEGIN_ALLOW_THREADS
    row_adagrad_step((float *)v[0], v[1], (float *)v[2], (const int64_t *)v[3], v[4],
                     (float *)v[5], lr, eps, &set);
    Py_END_ALLOW_THREADS
    free_row_set(&set);
    Py_RETURN_NONE;
}

/* Copies table[rows[k]] to out[k] for each k, asking for rows a few ahead of the copy. */
static void gather_step(const float *table, Py_ssize_t dim, const int64_t *rows,
                        Py_ssize_t count, float *out) {
    for (Py_ssize_t k = 0; k < count; k++) {
        if (k + PREFETCH_ROWS < count) PREFETCH_ROW(table + rows[k + PREFETCH_ROWS] * dim, dim, 0);
        memcpy(out + k * dim, table + rows[k] * dim, sizeof(float) * dim);
    }
}

/* xoshiro256** (Blackman and Vigna), seeded through splitmix64: the shuffle's random
 * numbers, one 64-bit draw per swap. */
typedef struct {
    uint64_t s[4];
} Xoshiro;

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static void xoshiro_seed(Xoshiro *r, uint64_t seed) {
    for (int k = 0; k < 4; k++) r->s[k] = splitmix64(&seed);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static inline uint64_t xoshiro_next(Xoshiro *r) {
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

/* Uniform in [0, bound) with no modulo bias: the high word of a 128-bit product, redrawn in
 * the rare case its low word falls in the biased range (Lemire's method). */
static inline uint64_t draw_below(Xoshiro *r, uint64_t bound) {
    __uint128_t m = (__uint128_t)xoshiro_next(r) * bound;
    if ((uint64_t)m < bound) {
        uint64_t threshold = -bound % bound;
        while ((uint64_t)m < threshold) m = (__uint128_t)xoshiro_next(r) * bound;
    }
    return (uint64_t)(m >> 64);
}

#define SHUFFLE_COLUMNS 3
#define SHUFFLE_AHEAD 32

/* Fisher-Yates from the last position down, the same swaps applied to every column. The
 * partners of the next SHUFFLE_AHEAD positions are drawn first and their cache lines asked
 * for, since in a column larger than the cache each one is a miss. */
static void shuffle_step(int64_t *const *columns, int num_columns, Py_ssize_t count,
                         Xoshiro *rng) {
    Py_ssize_t partners[SHUFFLE_AHEAD];
    for (Py_ssize_t top = count - 1; top > 0; top -= SHUFFLE_AHEAD) {
        int block = top < SHUFFLE_AHEAD ? (int)top : SHUFFLE_AHEAD;
        for (int k = 0; k < block; k++) {
            partners[k] = (Py_ssize_t)draw_below(rng, (uint64_t)(top - k) + 1);
            for (int c = 0; c < num_columns; c++) __builtin_prefetch(columns[c] + partners[k], 1);
        }
        for (int k = 0; k < block; k++) {
            Py_ssize_t i = top - k, j = partners[k];
            for (int c = 0; c < num_columns; c++) {
                int64_t held = columns[c][i];
                columns[c][i] = columns[c][j];
                columns[c][j] = held;
            }
        }
    }
}

/* shuffle_columns(seed, count, column, ...): one to three int64 columns of `count` elements */
static PyObject *shuffle_columns(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 3 || nargs > 2 + SHUFFLE_COLUMNS) {
        PyErr_SetString(PyExc_TypeError, "shuffle_columns takes a seed, a count and 1 to 3 "
                                         "columns");
        return NULL;
    }
    unsigned long long seed = PyLong_AsUnsignedLongLongMask(args[0]);
    Py_ssize_t v[1 + SHUFFLE_COLUMNS];
    if ((seed == (unsigned long long)-1 && PyErr_Occurred()) || read_ints(args + 1, nargs - 1, v))
        return NULL;
    int64_t *columns[SHUFFLE_COLUMNS];
    for (Py_ssize_t c = 0; c < nargs - 2; c++) columns[c] = (int64_t *)v[1 + c];
    Xoshiro rng;
    xoshiro_seed(&rng, seed);
    Py_BEGIN_ALLOW_THREADS
    shuffle_step(columns, (int)(nargs - 2), v[0], &rng);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

/* gather(table, dim, rows, count, out, num_rows) */
static PyObject *gather(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (expect_args("gather", nargs, 6)) return NULL;
    Py_ssize_t v[6];
    if (read_ints(args, 6, v)) return NULL;
    if (check_rows((const int64_t *)v[2], v[3], v[5])) return NULL;
    Py_BEGIN_ALLOW_THREADS
    gather_step((const float *)v[0], v[1], (const int64_t *)v[2], v[3], (float *)v[4]);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

/* Adagrad with one accumulator per element (torch.optim.Adagrad's update, no decay) for a
 * small dense parameter; `step` counts the updates, as torch's state does. */
VECTOR_CLONES
static void dense_adagrad_step(float *param, const float *grad, float *sum, float *step,
                               Py_ssize_t count, float lr, float eps) {
    for (Py_ssize_t i = 0; i < count; i++) {
        sum[i] += grad[i] * grad[i];
        param[i] -= lr * (grad[i] / (sqrtf(sum[i]) + eps));
    }
    *step += 1.0f;
}

/* dense_adagrad(param, grad, sum, step, count, lr, eps) */
static PyObject *dense_adagrad(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (expect_args("dense_adagrad", nargs, 7)) return NULL;
    Py_ssize_t v[5];
    float lr, eps;
    if (read_ints(args, 5, v) || read_lr_eps(args + 5, &lr, &eps)) return NULL;
    /* A few hundred floats: releasing the GIL would cost more than the loop. */
    dense_adagrad_step((float *)v[0], (const float *)v[1], (float *)v[2], (float *)v[3], v[4],
                       lr, eps);
    Py_RETURN_NONE;
}

/* MKL asks this function whether the CPU is Intel's and, where it says no, runs its
 * generic (AVX2 at most) code on any CPU, AVX-512 included: half the matrix-product speed of
 * an AVX-512 CPU of another vendor. `tessera.mkl_dispatch` loads this file into the global
 * symbol scope before torch, so that MKL finds this answer first and picks its code by the
 * CPU's features alone, as it does on Intel's CPUs. */
__attribute__((visibility("default"))) int mkl_serv_intel_cpu_true(void) { return 1; }

/* BLAS's single-precision matrix product (Fortran interface, column-major), found at run
 * time in the library torch itself uses (`use_matrix_product`); NULL until then. */
typedef void (*sgemm_fn)(const char *, const char *, const int *, const int *, const int *,
                         const float *, const float *, const int *, const float *,
                         const int *, const float *, float *, const int *);
static sgemm_fn sgemm = NULL;
/* MKL's MKL_Set_Num_Threads_Local, where the BLAS is MKL: the chunks' products are small
 * enough that splitting one across threads costs more than it saves. */
typedef int (*set_threads_fn)(int);
static set_threads_fn set_blas_threads = NULL;

/* Row-major C[m, n] = A[m, k] B[k, n] + beta C, where `a_t`/`b_t` say that A/B are stored
 * transposed. A row-major matrix is its transpose in column-major order, so this asks BLAS
 * for C^T = B^T A^T. */
static void matmul(int a_t, int b_t, int m, int n, int k, const float *a, int lda,
                   const float *b, int ldb, float beta, float *c, int ldc) {
    const float one = 1.0f;
    if (m == 0 || n == 0) return;
    if (k == 0) { /* an empty sum: BLAS would refuse the zero leading dimension */
        if (beta == 0.0f)
            for (int i = 0; i < m; i++) memset(c + (size_t)i * ldc, 0, sizeof(float) * n);
        return;
    }
    sgemm(b_t ? "T" : "N", a_t ? "T" : "N", &n, &m, &k, &one, b, &ldb, a, &lda, &beta, c,
          &ldc);
}

/* -1 with a RuntimeError set until `use_matrix_product` has given sgemm's address. */
static int needs_matrix_product(const char *name) {
    if (sgemm != NULL) return 0;
    PyErr_Format(PyExc_RuntimeError, "%s needs use_matrix_product first", name);
    return -1;
}

/* The pairs of one positive (threshold = its score - margin, key `pos_key`) with a row of
 * negatives: writes their score gradients to `grads` (may be `scores`), subtracts theirs
 * from the positive's and returns the summed violations. */
static inline float ranking_row(const float *scores, float *grads, const int32_t *keys,
                                int width, float threshold, int32_t pos_key, float weight,
                                float *pos_grad) {
    float loss = 0.0f, grad = 0.0f;
    for (int m = 0; m < width; m++)
        RANKING_PAIR(scores[m], keys[m], threshold, pos_key, grads[m], loss, grad);
    *pos_grad += grad;
    return loss;
}

/* sum[d] += rows[k, d] for each of `count` rows. */
static inline void add_rows(const float *rows, int count, int dim, float *restrict sum) {
    for (int k = 0; k < count; k++) {
        const float *restrict row = rows + (size_t)k * dim;
        for (int d = 0; d < dim; d++) sum[d] += row[d];
    }
}

/* The floats of `ranking_chunk`'s scratch for chunks of `size` edges and the sides' extra
 * negatives: S * (W_l + X_r + S + 2). */
static size_t chunk_scratch_floats(int size, int lhs_extra, int rhs_extra) {
    return (size_t)size * ((size_t)size + lhs_extra + rhs_extra + size + 2);
}

/* One chunk of `ranking_chunks`. Keys are int32 here (table rows: a table has fewer than
 * 2^31) so that the pair loops vectorise with the floats beside them. `scratch` holds
 * `chunk_scratch_floats` floats. */
VECTOR_CLONES
static double ranking_chunk(int size, int rows, int lhs_extra, int rhs_extra, int dim,
                            float margin, float weight, const float *l, const float *r,
                            float *l_grad, float *r_grad, const int32_t *l_keys,
                            const int32_t *r_keys, float *scratch, float *l_grad_sum,
                            float *r_grad_sum) {
    const int S = size, Wl = size + lhs_extra, Xr = rhs_extra;
    float *left = scratch;        /* [S, Wl]: right positives . left rows; B = first S cols */
    float *right = left + S * Wl; /* [S, Xr]: left positives . right extra rows */
    float *batch_t = right + S * Xr; /* [S, S]: right corruptions' gradient w.r.t. B */
    float *thresholds = batch_t + S * S, *pos_grad = thresholds + S;
    const float *r_extra = r + (size_t)S * dim;
    double loss = 0.0;
    matmul(0, 1, S, Wl, dim, r, dim, l, dim, 0.0f, left, Wl);
    matmul(0, 1, S, Xr, dim, l, dim, r_extra, dim, 0.0f, right, Xr);
    for (int i = 0; i < S; i++) {
        thresholds[i] = left[i * Wl + i] - margin; /* edge i's score is B's diagonal */
        pos_grad[i] = 0.0f;
    }
    /* Edge i's right side replaced by batch negative j scores B[j, i]: walk B by rows j so
     * that the inner loop runs along memory. Padding edges (i >= rows) count for nothing. */
    for (int j = 0; j < S; j++) {
        const float *scores = left + j * Wl;
        float *grad = batch_t + j * S, row_loss = 0.0f;
        int32_t neg_key = r_keys[j];
        for (int i = 0; i < rows; i++)
            RANKING_PAIR(scores[i], neg_key, thresholds[i], r_keys[i], grad[i], row_loss,
                         pos_grad[i]);
        for (int i = rows; i < S; i++) grad[i] = 0.0f;
        loss += row_loss;
    }
    for (int i = 0; i < rows; i++) { /* the other corruptions, row by row */
        loss += ranking_row(right + i * Xr, right + i * Xr, r_keys + S, Xr, thresholds[i],
                            r_keys[i], weight, pos_grad + i);
        loss += ranking_row(left + i * Wl, left + i * Wl, l_keys, Wl, thresholds[i],
                            l_keys[i], weight, pos_grad + i);
    }
    for (int i = rows; i < S; i++) { /* padding: no loss, no gradient */
        memset(right + i * Xr, 0, sizeof(float) * Xr);
        memset(left + i * Wl, 0, sizeof(float) * Wl);
    }
    for (int j = 0; j < S; j++) { /* B's whole gradient: its left and right corruptions' */
        float *restrict into = left + (size_t)j * Wl;
        const float *restrict from = batch_t + (size_t)j * S;
        for (int i = 0; i < S; i++) into[i] += from[i];
    }
    /* Backward. L', R', B': the score gradients, written over the scores. Every left row's
     * gradient takes L'^T r_pos (B' is L's first S columns: one product for all Wl rows);
     * each positive score is the inner product of the edge's two sides. (Row pointers and
     * the factor held in locals: the compiler cannot tell that the stores miss them, and
     * would not vectorise.) */
    matmul(1, 0, Wl, dim, S, left, Wl, r, dim, 0.0f, l_grad, dim);       /* L'^T r_pos */
    for (int i = 0; i < S; i++) {
        const float factor = pos_grad[i];
        const float *restrict l_row = l + (size_t)i * dim, *restrict r_row = r + (size_t)i * dim;
        float *restrict l_out = l_grad + (size_t)i * dim, *restrict r_out = r_grad + (size_t)i * dim;
        for (int d = 0; d < dim; d++) {
            l_out[d] += factor * r_row[d];
            r_out[d] = factor * l_row[d];
        }
    }
    matmul(0, 0, S, dim, Xr, right, Xr, r_extra, dim, 1.0f, l_grad, dim); /* += R' r_extra */
    matmul(0, 0, S, dim, Wl, left, Wl, l, dim, 1.0f, r_grad, dim);       /* += L' l */
    matmul(1, 0, Xr, dim, S, right, Xr, l, dim, 0.0f, r_grad + (size_t)S * dim, dim);
    add_rows(l_grad, Wl, dim, l_grad_sum); /* while they are in cache */
    add_rows(r_grad, S + Xr, dim, r_grad_sum);
    return loss;
}

/* A batch of `chunks` chunks of `size` edges, the first `valid` real, chunk by chunk
 * (`ranking_chunk`); each side [chunks, size + extra, dim] with int32 keys beside it. Zeroes
 * and fills both sides' gradient sums; returns the summed violations. */
static double score_chunks(int chunks, int size, int valid, int lhs_extra, int rhs_extra,
                           int dim, float margin, float weight, const float *l,
                           const float *r, float *l_grad, float *r_grad,
                           const int32_t *l_keys, const int32_t *r_keys, float *scratch,
                           float *l_grad_sum, float *r_grad_sum) {
    size_t lhs_width = (size_t)size + lhs_extra, rhs_width = (size_t)size + rhs_extra;
    double loss = 0.0;
    memset(l_grad_sum, 0, sizeof(float) * dim);
    memset(r_grad_sum, 0, sizeof(float) * dim);
    for (int c = 0; c < chunks; c++) {
        int rows = valid - c * size;
        rows = rows < 0 ? 0 : rows > size ? size : rows;
        size_t l_at = (size_t)c * lhs_width, r_at = (size_t)c * rhs_width;
        loss += ranking_chunk(size, rows, lhs_extra, rhs_extra, dim, margin, weight,
                              l + l_at * dim, r + r_at * dim, l_grad + l_at * dim,
                              r_grad + r_at * dim, l_keys + l_at, r_keys + r_at, scratch,
                              l_grad_sum, r_grad_sum);
    }
    return loss;
}

/* Copies `count` keys to int32; -1 with a ValueError set if one does not fit. */
static int narrow_keys(const int64_t *keys, Py_ssize_t count, int32_t *out) {
    for (Py_ssize_t k = 0; k < count; k++) {
        if (keys[k] > INT32_MAX || keys[k] < INT32_MIN) {
            PyErr_Format(PyExc_ValueError, "entity key %lld does not fit in 32 bits",
                         (long long)keys[k]);
            return -1;
        }
        out[k] = (int32_t)keys[k];
    }
    return 0;
}

/* The batch of `ranking_chunks` (mirrored by `tessera.kernels.Batch`): `chunks` chunks of
 * `size` edges, the first `edges` of them real (the rest padding), rows of `dim` floats. */
typedef struct {
    Py_ssize_t chunks, size, edges, dim;
} Batch;

/* One side of the batch in `ranking_chunks` (mirrored by `tessera.kernels.Side`), all
 * contiguous: its prepared embeddings [C, S + X, dim] (a chunk's S positives, then its X
 * extra negatives), the keys [C, S + X] naming their entities (negative: padding), where
 * their gradients go (same shape) and the sum of those gradients' rows [dim]. */
typedef struct {
    const float *rows;
    const int64_t *keys;
    float *grads;
    float *grad_sum;
    Py_ssize_t extra; /* X */
} Side;

/* ranking_chunks(margin, weight, batch, lhs, rhs): returns the loss times `weight`. */
static PyObject *ranking_chunks(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (expect_args("ranking_chunks", nargs, 5)) return NULL;
    if (needs_matrix_product("ranking_chunks")) return NULL;
    double margin = PyFloat_AsDouble(args[0]), weight = PyFloat_AsDouble(args[1]);
    if (PyErr_Occurred()) return NULL;
    Batch batch;
    Side lhs, rhs;
    if (read_struct(args[2], "batch", &batch, sizeof batch) ||
        read_struct(args[3], "lhs", &lhs, sizeof lhs) ||
        read_struct(args[4], "rhs", &rhs, sizeof rhs))
        return NULL;
    int chunks = (int)batch.chunks, size = (int)batch.size, valid = (int)batch.edges;
    int dim = (int)batch.dim, lhs_extra = (int)lhs.extra, rhs_extra = (int)rhs.extra;
    int lhs_width = size + lhs_extra, rhs_width = size + rhs_extra;
    size_t lhs_count = (size_t)chunks * lhs_width, rhs_count = (size_t)chunks * rhs_width;
    float *scratch = PyMem_RawMalloc(sizeof(float) *
                                     chunk_scratch_floats(size, lhs_extra, rhs_extra));
    int32_t *keys = PyMem_RawMalloc(sizeof(int32_t) * (lhs_count + rhs_count));
    PyObject *result = NULL;
    if (!scratch || !keys) {
        PyErr_NoMemory();
        goto done;
    }
    if (narrow_keys(lhs.keys, lhs_count, keys) ||
        narrow_keys(rhs.keys, rhs_count, keys + lhs_count))
        goto done;
    double loss = 0.0;
    Py_BEGIN_ALLOW_THREADS
    int threads = set_blas_threads ? set_blas_threads(1) : 0; /* this thread's setting */
    loss = score_chunks(chunks, size, valid, lhs_extra, rhs_extra, dim, (float)margin,
                        (float)weight, lhs.rows, rhs.rows, lhs.grads, rhs.grads, keys,
                        keys + lhs_count, scratch, lhs.grad_sum, rhs.grad_sum);
    if (set_blas_threads) set_blas_threads(threads);
    Py_END_ALLOW_THREADS
    result = PyFloat_FromDouble(loss * weight);
done:
    PyMem_RawFree(scratch);
    PyMem_RawFree(keys);
    return result;
}

/* An embedding table of `train_ranking` (mirrored by `tessera.kernels.Table`): its rows
 * [count, dim] and one Adagrad accumulator per row. */
typedef struct {
    float *rows;
    float *row_sum;
    Py_ssize_t count;
} Table;

/* A vector [dim] added to every row of a side (a global embedding, a translation), with its
 * Adagrad accumulator [dim] and update count (mirrored by `tessera.kernels.Shift`). */
typedef struct {
    float *value;
    float *sum;
    float *step;
} Shift;

#define MAX_SHIFTS 3 /* the left and right global embeddings and a translation */
#define SIDE_SHIFTS 2

/* One side of the edges `train_ranking` trains on (mirrored by `tessera.kernels.LoopSide`):
 * its entity ids [edges], its uniform negatives (each batch's [chunks, uniform], batch after
 * batch), its table, and which shifts it adds, in order (-1: none). */
typedef struct {
    const int64_t *ids;
    const int64_t *negatives;
    Py_ssize_t num_negatives;
    Table table;
    Py_ssize_t shifts[SIDE_SHIFTS];
} LoopSide;

/* The settings of `train_ranking` (mirrored by `tessera.kernels.Loop`). */
typedef struct {
    Py_ssize_t edges, batch_size, chunk_size, uniform, dim, num_shifts;
    double margin, weight, lr, shift_lr, eps;
    Shift shift[MAX_SHIFTS];
} Loop;

/* The chunks a batch of `edges` edges is cut into, and their size: `chunk_size` edges, or
 * all of them when fewer (tessera.model.negatives.plan_chunking). */
static void batch_chunks(Py_ssize_t edges, Py_ssize_t chunk_size, int *chunks, int *size) {
    *size = (int)(edges < chunk_size ? edges : chunk_size);
    *chunks = (int)((edges + *size - 1) / *size);
}

/* One side's rows of a batch starting at edge `start`, chunk by chunk: the chunk's edges
 * (padding: the batch's first entity), then its uniform negatives; and their int32 keys:
 * the edge's position in the batch (padding -1), the negatives `edges` (no edge's). */
static void side_rows(const LoopSide *side, Py_ssize_t start, int edges, int chunks, int size,
                      int uniform, const int64_t *negatives, int64_t *rows, int32_t *keys) {
    int width = size + uniform;
    for (int c = 0; c < chunks; c++) {
        int64_t *row = rows + (size_t)c * width;
        int32_t *key = keys + (size_t)c * width;
        for (int i = 0; i < size; i++) {
            int e = c * size + i;
            row[i] = side->ids[start + (e < edges ? e : 0)];
            key[i] = e < edges ? e : -1;
        }
        for (int u = 0; u < uniform; u++) {
            row[size + u] = negatives[(size_t)c * uniform + u];
            key[size + u] = edges;
        }
    }
}

/* The sum of a side's shifts (NULL when it has none), as the torch code adds them: the
 * first plus the others, in order. */
static const float *side_shift(const Loop *loop, const LoopSide *side, float *out) {
    if (side->shifts[0] < 0) return NULL;
    const float *first = loop->shift[side->shifts[0]].value;
    if (side->shifts[1] < 0) return first;
    const float *second = loop->shift[side->shifts[1]].value;
    for (Py_ssize_t d = 0; d < loop->dim; d++) out[d] = first[d] + second[d];
    return out;
}

/* Copies table[rows[k]] + shift (NULL: nothing added) to out[k], rows asked for ahead. */
VECTOR_CLONES
static void gather_shifted(const float *table, Py_ssize_t dim, const int64_t *rows,
                           Py_ssize_t count, const float *shift, float *out) {
    for (Py_ssize_t k = 0; k < count; k++) {
        if (k + PREFETCH_ROWS < count) PREFETCH_ROW(table + rows[k + PREFETCH_ROWS] * dim, dim, 0);
        const float *from = table + rows[k] * dim;
        float *to = out + k * dim;
        if (shift)
            for (Py_ssize_t d = 0; d < dim; d++) to[d] = from[d] + shift[d];
        else
            memcpy(to, from, sizeof(float) * dim);
    }
}

/* Adagrad on each shift from the gradient sums of the sides that add it (left first). */
static void step_shifts(const Loop *loop, const LoopSide *lhs, const LoopSide *rhs,
                        const float *l_sum, const float *r_sum, float *grad) {
    for (Py_ssize_t k = 0; k < loop->num_shifts; k++) {
        int used = 0;
        for (int side = 0; side < 2; side++) {
            const LoopSide *s = side ? rhs : lhs;
            const float *sum = side ? r_sum : l_sum;
            if (s->shifts[0] != k && s->shifts[1] != k) continue;
            for (Py_ssize_t d = 0; d < loop->dim; d++) grad[d] = used ? grad[d] + sum[d] : sum[d];
            used = 1;
        }
        if (used)
            dense_adagrad_step(loop->shift[k].value, grad, loop->shift[k].sum,
                               loop->shift[k].step, loop->dim, (float)loop->shift_lr,
                               (float)loop->eps);
    }
}

/* The buffers of `train_ranking`, sized for its largest batch; NULL members if out of
 * memory. */
typedef struct {
    int64_t *rows;   /* both sides' rows of a batch, the left's first */
    int32_t *keys;   /* their keys */
    float *embs;     /* their shifted embeddings */
    float *grads;    /* their gradients */
    float *scratch;  /* ranking_chunk's */
    float *vectors;  /* 5 x dim: 2 shift sums, 2 gradient sums, a shift's gradient */
    RowSet distinct; /* the Adagrad steps' (one side's rows, or both sides') */
} LoopBuffers;

static int alloc_loop_buffers(const Loop *loop, LoopBuffers *b) {
    int chunks, size;
    batch_chunks(loop->batch_size < loop->edges ? loop->batch_size : loop->edges,
                 loop->chunk_size, &chunks, &size);
    size_t slots = 2 * (size_t)chunks * (size + loop->uniform), dim = (size_t)loop->dim;
    b->rows = PyMem_RawMalloc(sizeof(int64_t) * slots);
    b->keys = PyMem_RawMalloc(sizeof(int32_t) * slots);
    b->embs = PyMem_RawMalloc(sizeof(float) * slots * dim);
    b->grads = PyMem_RawMalloc(sizeof(float) * slots * dim);
    b->scratch = PyMem_RawMalloc(
        sizeof(float) * chunk_scratch_floats(size, (int)loop->uniform, (int)loop->uniform));
    b->vectors = PyMem_RawMalloc(sizeof(float) * 5 * dim);
    int distinct = alloc_row_set(&b->distinct, (Py_ssize_t)slots);
    return b->rows && b->keys && b->embs && b->grads && b->scratch && b->vectors
           && distinct == 0 ? 0 : -1;
}

static void free_loop_buffers(LoopBuffers *b) {
    PyMem_RawFree(b->rows);
    PyMem_RawFree(b->keys);
    PyMem_RawFree(b->embs);
    PyMem_RawFree(b->grads);
    PyMem_RawFree(b->scratch);
    PyMem_RawFree(b->vectors);
    free_row_set(&b->distinct);
}

/* Trains the edges batch after batch: each batch's rows gathered and shifted, scored chunk
 * by chunk (`ranking_chunk`), then row-wise Adagrad on the rows and Adagrad on the shifts,
 * before the next batch reads them. Returns the summed loss times the weight. */
static double ranking_loop(const Loop *loop, const LoopSide *lhs, const LoopSide *rhs,
                           const LoopBuffers *b) {
    const Py_ssize_t dim = loop->dim;
    const int uniform = (int)loop->uniform;
    const int same_table = lhs->table.rows == rhs->table.rows;
    float *l_shift = b->vectors, *r_shift = l_shift + dim, *l_sum = r_shift + dim;
    float *r_sum = l_sum + dim, *shift_grad = r_sum + dim;
    const int64_t *l_negs = lhs->negatives, *r_negs = rhs->negatives;
    double total = 0.0;
    for (Py_ssize_t start = 0; start < loop->edges; start += loop->batch_size) {
        Py_ssize_t left = loop->edges - start;
        int edges = (int)(left < loop->batch_size ? left : loop->batch_size), chunks, size;
        batch_chunks(edges, loop->chunk_size, &chunks, &size);
        size_t count = (size_t)chunks * (size + uniform); /* one side's rows */
        side_rows(lhs, start, edges, chunks, size, uniform, l_negs, b->rows, b->keys);
        side_rows(rhs, start, edges, chunks, size, uniform, r_negs, b->rows + count,
                  b->keys + count);
        l_negs += (size_t)chunks * uniform;
        r_negs += (size_t)chunks * uniform;
        float *l_embs = b->embs, *r_embs = b->embs + count * dim;
        float *l_grads = b->grads, *r_grads = b->grads + count * dim;
        gather_shifted(lhs->table.rows, dim, b->rows, count, side_shift(loop, lhs, l_shift),
                       l_embs);
        gather_shifted(rhs->table.rows, dim, b->rows + count, count,
                       side_shift(loop, rhs, r_shift), r_embs);
        double loss = score_chunks(chunks, size, edges, uniform, uniform, (int)dim,
                                   (float)loop->margin, (float)loop->weight, l_embs, r_embs,
                                   l_grads, r_grads, b->keys, b->keys + count, b->scratch,
                                   l_sum, r_sum);
        total += loss * loop->weight;
        /* One table: one step over both sides' rows, so a row on both gets one update. */
        for (int side = 0; side < (same_table ? 1 : 2); side++) {
            const Table *t = side ? &rhs->table : &lhs->table;
            row_adagrad_step(t->rows, dim, t->row_sum, b->rows + side * count,
                             same_table ? 2 * count : count, b->grads + side * count * dim,
                             (float)loop->lr, (float)loop->eps, &b->distinct);
        }
        step_shifts(loop, lhs, rhs, l_sum, r_sum, shift_grad);
    }
    return total;
}

/* -1 with an IndexError set unless every id and negative of a side names a row of its
 * table, and its negatives are as many as the batches draw. */
static int check_side(const Loop *loop, const LoopSide *side, const char *name) {
    Py_ssize_t needed = 0;
    for (Py_ssize_t start = 0; start < loop->edges; start += loop->batch_size) {
        Py_ssize_t left = loop->edges - start;
        int chunks, size;
        batch_chunks(left < loop->batch_size ? left : loop->batch_size, loop->chunk_size,
                     &chunks, &size);
        needed += (Py_ssize_t)chunks * loop->uniform;
    }
    if (side->num_negatives != needed) {
        PyErr_Format(PyExc_ValueError, "%s side: %zd uniform negatives for batches that draw %zd",
                     name, side->num_negatives, needed);
        return -1;
    }
    if (check_rows(side->ids, loop->edges, side->table.count)) return -1;
    return check_rows(side->negatives, side->num_negatives, side->table.count);
}

/* train_ranking(loop, lhs, rhs): PBG's default setup (ranking loss, batch and uniform
 * negatives on both sides, inner products, shifts at most) over a worker's edges in one call;
 * the same steps as the batch loop of `tessera.training.worker.train_part`. */
/* A worker's loop buffers, kept from one `train_ranking` call to the next (a capsule's
 * contents): allocated for every call, two threads' buffers and the allocations between
 * calls left the heap more fragmented at each call, a few megabytes over a bucket. `loop`
 * holds the sizes they were made for. */
typedef struct {
    Loop loop;
    LoopBuffers buffers;
} Workspace;

#define WORKSPACE "tessera._kernels.Workspace"

static void free_workspace(PyObject *capsule) {
    Workspace *w = PyCapsule_GetPointer(capsule, WORKSPACE);
    if (w == NULL) return;
    free_loop_buffers(&w->buffers);
    PyMem_RawFree(w);
}

static Py_ssize_t effective_batch(const Loop *loop) {
    return loop->batch_size < loop->edges ? loop->batch_size : loop->edges;
}

/* loop_buffers(loop): buffers for `train_ranking` calls whose batches are at most
 * loop.batch_size edges (and loop.edges) with its chunk size, negatives and dimension. */
static PyObject *loop_buffers(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (expect_args("loop_buffers", nargs, 1)) return NULL;
    Workspace *w = PyMem_RawCalloc(1, sizeof(Workspace));
    if (w == NULL) return PyErr_NoMemory();
    if (read_struct(args[0], "loop", &w->loop, sizeof w->loop)) {
        PyMem_RawFree(w);
        return NULL;
    }
    if (w->loop.batch_size < 1 || w->loop.chunk_size < 1 || w->loop.edges < 1) {
        PyMem_RawFree(w);
        PyErr_SetString(PyExc_ValueError, "loop_buffers: bad batch, chunk or edge count");
        return NULL;
    }
    if (alloc_loop_buffers(&w->loop, &w->buffers)) {
        free_loop_buffers(&w->buffers);
        PyMem_RawFree(w);
        return PyErr_NoMemory();
    }
    PyObject *capsule = PyCapsule_New(w, WORKSPACE, free_workspace);
    if (capsule == NULL) {
        free_loop_buffers(&w->buffers);
        PyMem_RawFree(w);
    }
    return capsule;
}

/* train_ranking(loop, lhs, rhs, buffers): `buffers` from `loop_buffers`. */
static PyObject *train_ranking(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (expect_args("train_ranking", nargs, 4)) return NULL;
    if (needs_matrix_product("train_ranking")) return NULL;
    Loop loop;
    LoopSide lhs, rhs;
    if (read_struct(args[0], "loop", &loop, sizeof loop) ||
        read_struct(args[1], "lhs", &lhs, sizeof lhs) ||
        read_struct(args[2], "rhs", &rhs, sizeof rhs))
        return NULL;
    Workspace *kept = PyCapsule_GetPointer(args[3], WORKSPACE);
    if (kept == NULL) return NULL;
    if (loop.edges == 0) return PyFloat_FromDouble(0.0);
    if (loop.batch_size < 1 || loop.chunk_size < 1 || loop.num_shifts > MAX_SHIFTS) {
        PyErr_SetString(PyExc_ValueError, "train_ranking: bad batch, chunk or shift count");
        return NULL;
    }
    if (check_side(&loop, &lhs, "left") || check_side(&loop, &rhs, "right")) return NULL;
    if (effective_batch(&loop) > effective_batch(&kept->loop) ||
        loop.chunk_size != kept->loop.chunk_size || loop.uniform != kept->loop.uniform ||
        loop.dim != kept->loop.dim) {
        PyErr_SetString(PyExc_ValueError, "train_ranking: the buffers were made for other "
                                          "batches");
        return NULL;
    }
    double loss;
    Py_BEGIN_ALLOW_THREADS
    int threads = set_blas_threads ? set_blas_threads(1) : 0;
    loss = ranking_loop(&loop, &lhs, &rhs, &kept->buffers);
    if (set_blas_threads) set_blas_threads(threads);
    Py_END_ALLOW_THREADS
    return PyFloat_FromDouble(loss);
}

/* use_matrix_product(sgemm_address, set_threads_address or 0): the BLAS functions
 * ranking_chunks calls. */
static PyObject *use_matrix_product(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (expect_args("use_matrix_product", nargs, 2)) return NULL;
    Py_ssize_t v[2];
    if (read_ints(args, 2, v)) return NULL;
    if (v[0] == 0) {
        PyErr_SetString(PyExc_ValueError, "use_matrix_product needs sgemm_'s address");
        return NULL;
    }
    sgemm = (sgemm_fn)v[0];
    set_blas_threads = (set_threads_fn)v[1];
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"dense_adagrad", (PyCFunction)(void (*)(void))dense_adagrad, METH_FASTCALL,
     "Adagrad step of a small dense parameter, one accumulator per element."},
    {"gather", (PyCFunction)(void (*)(void))gather, METH_FASTCALL,
     "Rows of a table copied out in the order named, with prefetch."},
    {"ranking_loss", (PyCFunction)(void (*)(void))ranking_loss, METH_FASTCALL,
     "Masked ranking loss of one side's negatives and its score gradients, in one pass."},
    {"softmax_loss", (PyCFunction)(void (*)(void))softmax_loss, METH_FASTCALL,
     "Masked softmax loss of one side's negatives and its score gradients, row by row."},
    {"ranking_chunks", (PyCFunction)(void (*)(void))ranking_chunks, METH_FASTCALL,
     "Scores, ranking loss and embedding gradients of a batch, chunk by chunk."},
    {"loop_buffers", (PyCFunction)(void (*)(void))loop_buffers, METH_FASTCALL,
     "Buffers that a worker's train_ranking calls share (a capsule)."},
    {"train_ranking", (PyCFunction)(void (*)(void))train_ranking, METH_FASTCALL,
     "PBG's default setup trained over a worker's edges, batch after batch, in one call."},
    {"row_adagrad", (PyCFunction)(void (*)(void))row_adagrad, METH_FASTCALL,
     "Row-wise Adagrad step on the rows a batch touched, repeats summed."},
    {"shuffle_columns", (PyCFunction)(void (*)(void))shuffle_columns, METH_FASTCALL,
     "Equal-length int64 columns reordered in place by one random permutation."},
    {"use_matrix_product", (PyCFunction)(void (*)(void))use_matrix_product, METH_FASTCALL,
     "Sets the BLAS functions (by address) that ranking_chunks calls."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kernels",
                                    "Fused loops of the training step.", -1, methods};

PyMODINIT_FUNC PyInit__kernels(void) { return PyModule_Create(&module); }
