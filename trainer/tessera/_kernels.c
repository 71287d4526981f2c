/* Fused loops of the training step that eager PyTorch runs as many passes over memory.
 *
 * The first two replace a chain of small tensor operations whose cost is dominated by
 * reading and writing the same few hundred kilobytes again and again; the third is a plain
 * row copy that asks for the (random) rows of a large table ahead of time; the last replaces
 * five tensor operations whose per-call overhead outweighs a few hundred floats of work:
 *
 *   ranking_loss   masks a side's negative scores, evaluates the ranking loss and writes its
 *                  gradients w.r.t. the positive and negative scores, in one pass;
 *   row_adagrad    sums the gradients of repeated rows and applies row-wise Adagrad to an
 *                  embedding table and its accumulators, one pass per touched row;
 *   gather         copies the rows a batch names out of an embedding table;
 *   dense_adagrad  steps a small dense parameter (operators, global embeddings).
 *
 * Tensors arrive as addresses and element strides (the Python side, `tessera.kernels`,
 * checks dtypes and shapes), so this file needs no PyTorch headers and builds in a second.
 * The torch code in `tessera.model.losses` and `tessera.training.optimizers` is the
 * reference: the tests hold both equal.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* Hot loops get an AVX2 build beside the baseline one; the loader picks what the CPU has. */
#if defined(__x86_64__) && defined(__GNUC__)
#define VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define VECTOR_CLONES
#endif

/* A strided 3-D float view [C, S, M] of scores, where their gradients go (same shape, may be
 * the same memory) and the keys [C, M] naming the entities of its M negatives. */
typedef struct {
    const float *scores;
    Py_ssize_t sc, ss, sm;
    float *grads;
    Py_ssize_t gc, gs, gm;
    const int64_t *keys;
    Py_ssize_t kc, km;
    Py_ssize_t width;
} Block;

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
    double loss = 0.0;
    const float *scores = b->scores + c * b->sc;
    float *grads = b->grads + c * b->gc;
    const int64_t *keys = b->keys + c * b->kc;
    if (b->sm == 1 && b->gm == 1 && b->km == 1) { /* along the negatives */
        for (Py_ssize_t s = 0; s < rows; s++) {
            const float *x = scores + s * b->ss;
            float *g = grads + s * b->gs;
            float threshold = thresholds[s], row_loss = 0.0f, row_grad = 0.0f;
            int64_t key = pos_keys[s];
            for (Py_ssize_t m = 0; m < b->width; m++)
                RANKING_PAIR(x[m], keys[m], threshold, key, g[m], row_loss, row_grad);
            loss += row_loss;
            pos_grad[s] += row_grad;
        }
    } else if (b->ss == 1 && b->gs == 1) { /* along the positives (a transposed block) */
        for (Py_ssize_t m = 0; m < b->width; m++) {
            const float *x = scores + m * b->sm;
            float *g = grads + m * b->gm;
            int64_t neg_key = keys[m * b->km];
            float column_loss = 0.0f;
            for (Py_ssize_t s = 0; s < rows; s++)
                RANKING_PAIR(x[s], neg_key, thresholds[s], pos_keys[s], g[s], column_loss,
                             pos_grad[s]);
            loss += column_loss;
        }
    } else {
        for (Py_ssize_t s = 0; s < rows; s++)
            for (Py_ssize_t m = 0; m < b->width; m++)
                RANKING_PAIR(scores[s * b->ss + m * b->sm], keys[m * b->km], thresholds[s],
                             pos_keys[s], grads[s * b->gs + m * b->gm], loss, pos_grad[s]);
    }
    return loss;
}

/* Arguments, in this order (see kernels.py): */
enum {
    A_MARGIN, A_WEIGHT, /* floats */
    A_CHUNKS, A_SIZE, A_VALID, A_POS, A_POS_SC, A_POS_SS, A_KEY, A_KEY_SC, A_KEY_SS,
    A_POS_GRAD,
    A_BLOCKS, /* then two blocks of 11: scores, 3 strides, grads, 3 strides, keys, 2 strides */
    BLOCK_ARGS = 11,
    A_WIDTHS = A_BLOCKS + 2 * BLOCK_ARGS, /* then the two widths */
    RANKING_ARGS = A_WIDTHS + 2
};

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

/* The ranking loss of one side's negatives, given as one or two blocks of columns; writes
 * their gradients and adds the positives' to pos_grad [C, S]. Padding rows (past `valid`
 * edges) get zero gradients. Returns the loss. */
static PyObject *ranking_loss(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (expect_args("ranking_loss", nargs, RANKING_ARGS)) return NULL;
    Py_ssize_t v[RANKING_ARGS];
    double margin = PyFloat_AsDouble(args[A_MARGIN]);
    double weight = PyFloat_AsDouble(args[A_WEIGHT]);
    if (PyErr_Occurred()) return NULL;
    if (read_ints(args + A_CHUNKS, RANKING_ARGS - A_CHUNKS, v + A_CHUNKS)) return NULL;
    Block blocks[2];
    for (int b = 0; b < 2; b++) {
        const Py_ssize_t *a = v + A_BLOCKS + b * BLOCK_ARGS;
        blocks[b] = (Block){(const float *)a[0], a[1], a[2], a[3], (float *)a[4], a[5], a[6],
                            a[7], (const int64_t *)a[8], a[9], a[10], v[A_WIDTHS + b]};
    }
    const float *pos = (const float *)v[A_POS];
    const int64_t *keys = (const int64_t *)v[A_KEY];
    float *pos_grad = (float *)v[A_POS_GRAD];
    Py_ssize_t chunks = v[A_CHUNKS], size = v[A_SIZE], valid = v[A_VALID];
    float *thresholds = PyMem_RawMalloc(sizeof(float) * size);
    int64_t *pos_keys = PyMem_RawMalloc(sizeof(int64_t) * size);
    if (!thresholds || !pos_keys) {
        PyMem_RawFree(thresholds);
        PyMem_RawFree(pos_keys);
        return PyErr_NoMemory();
    }
    double loss = 0.0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t c = 0; c < chunks; c++) {
        Py_ssize_t rows = valid - c * size;
        rows = rows < 0 ? 0 : rows > size ? size : rows;
        for (Py_ssize_t s = 0; s < size; s++) {
            thresholds[s] = pos[c * v[A_POS_SC] + s * v[A_POS_SS]] - (float)margin;
            pos_keys[s] = keys[c * v[A_KEY_SC] + s * v[A_KEY_SS]];
        }
        for (int b = 0; b < 2; b++) {
            const Block *block = &blocks[b];
            loss += ranking_tile(block, c, rows, thresholds, pos_keys, (float)weight,
                                 pos_grad + c * size);
            for (Py_ssize_t s = rows; s < size; s++) /* padding */
                for (Py_ssize_t m = 0; m < block->width; m++)
                    block->grads[c * block->gc + s * block->gs + m * block->gm] = 0.0f;
        }
    }
    Py_END_ALLOW_THREADS
    PyMem_RawFree(thresholds);
    PyMem_RawFree(pos_keys);
    return PyFloat_FromDouble(loss * weight);
}

/* How many rows ahead the row loops ask for the table rows they will read or update: their
 * addresses are random, so without it every row would wait for memory. */
#define PREFETCH_ROWS 8

/* Asks for every 64-byte line of a row of `dim` floats; `rw` is 1 when it will be written
 * (a macro: the builtin wants its hint as a constant). */
#define PREFETCH_ROW(row, dim, rw) \
    for (Py_ssize_t line_ = 0; line_ < (dim); line_ += 16) __builtin_prefetch((row) + line_, (rw))

/* Sums the gradients of repeated rows into their first occurrence, then applies row-wise
 * Adagrad to each distinct row. `slots` (one per table row, all -1 before and after) holds
 * where each row's first occurrence is. */
VECTOR_CLONES
static void row_adagrad_step(float *table, Py_ssize_t dim, float *row_sum,
                             const int64_t *rows, Py_ssize_t count, float *grads, float lr,
                             float eps, int32_t *slots) {
    for (Py_ssize_t k = 0; k < count; k++) {
        if (k + PREFETCH_ROWS < count) {
            int64_t ahead = rows[k + PREFETCH_ROWS];
            __builtin_prefetch(slots + ahead, 1);
            __builtin_prefetch(row_sum + ahead, 1);
        }
        int32_t first = slots[rows[k]];
        if (first < 0) {
            slots[rows[k]] = (int32_t)k;
            continue;
        }
        float *into = grads + first * dim;
        const float *g = grads + k * dim;
        for (Py_ssize_t d = 0; d < dim; d++) into[d] += g[d];
    }
    for (Py_ssize_t k = 0; k < count; k++) {
        if (k + PREFETCH_ROWS < count) PREFETCH_ROW(table + rows[k + PREFETCH_ROWS] * dim, dim, 1);
        int64_t row = rows[k];
        if (slots[row] != k) continue; /* a repeat, already summed into its first */
        slots[row] = -1;
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

/* row_adagrad(table, dim, row_sum, rows, count, grads, slots, num_rows, lr, eps) */
static PyObject *row_adagrad(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (expect_args("row_adagrad", nargs, 10)) return NULL;
    Py_ssize_t v[8];
    float lr, eps;
    if (read_ints(args, 8, v) || read_lr_eps(args + 8, &lr, &eps)) return NULL;
    if (check_rows((const int64_t *)v[3], v[4], v[7])) return NULL;
    Py_BEGIN_ALLOW_THREADS
    row_adagrad_step((float *)v[0], v[1], (float *)v[2], (const int64_t *)v[3], v[4],
                     (float *)v[5], lr, eps, (int32_t *)v[6]);
    Py_END_ALLOW_THREADS
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

static PyMethodDef methods[] = {
    {"dense_adagrad", (PyCFunction)(void (*)(void))dense_adagrad, METH_FASTCALL,
     "Adagrad step of a small dense parameter, one accumulator per element."},
    {"gather", (PyCFunction)(void (*)(void))gather, METH_FASTCALL,
     "Rows of a table copied out in the order named, with prefetch."},
    {"ranking_loss", (PyCFunction)(void (*)(void))ranking_loss, METH_FASTCALL,
     "Masked ranking loss of one side's negatives and its score gradients, in one pass."},
    {"row_adagrad", (PyCFunction)(void (*)(void))row_adagrad, METH_FASTCALL,
     "Row-wise Adagrad step on the rows a batch touched, repeats summed."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kernels",
                                    "Fused loops of the training step.", -1, methods};

PyMODINIT_FUNC PyInit__kernels(void) { return PyModule_Create(&module); }
