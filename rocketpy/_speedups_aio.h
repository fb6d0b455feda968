/* rocketpy._speedups, the commit log's fdatasync completed on the reactor's epoll: included once
 * from _speedups.c.
 *
 * syncer_*: a pthread of the process that runs fdatasync without the GIL and adds one to an
 * eventfd the reactor watches when a sync ends (rocketpy/store/aioflush.py, "native"), so that a
 * SYNC_FLUSH group commit crosses no Python thread. The same through io_uring: _speedups_uring.h.
 * Linked to a lean reactor's turn (syncer_direct, _speedups_syncwrite.h), the thread also writes the lone
 * answers a successful sync made durable itself, while that reactor sleeps, before the eventfd.
 * Not Linux: no functions.
 */

#ifdef __linux__
#include <errno.h>

/* the finished requests' results as a list of ints (0, or -errno) */
static PyObject *results_list(const long long *results, long n) {
    long i;
    PyObject *out = PyList_New(n);
    if (out == NULL)
        return NULL;
    for (i = 0; i < n; i++) {
        PyObject *res = PyLong_FromLongLong(results[i]);
        if (res == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, res);
    }
    return out;
}

/* syncer_start(eventfd) starts a pthread that runs fdatasync for each syncer_submit(syncer, fd) in
 * turn and adds one to the eventfd after each; syncer_reap(syncer) -> [result, ...] (0 or -errno,
 * in order, without waiting); syncer_stop joins it. The scheduler may run it on any CPU, and its
 * time counts as the broker's. */
#include <pthread.h>
#include <unistd.h>

#define SYNCER_DEPTH 8

typedef struct sw_gate sw_gate;  /* _speedups_syncwrite.h: answers this thread may write itself */

typedef struct {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int efd, stop, started;
    int fds[SYNCER_DEPTH], fhead, flen;
    long long results[SYNCER_DEPTH];
    int rhead, rlen;
    /* the syncs numbered in order: dequeued by the thread, and whose results were taken */
    unsigned long long dequeued, taken;
    sw_gate *gate;  /* the lean reactor's gate (syncer_direct), or NULL */
    PyObject *gate_owner;  /* the ReactorTurn the gate is of (kept while the thread may use it) */
    long long direct_written;  /* answers the thread wrote itself */
} syncer_t;

static void sw_write(sw_gate *gate, syncer_t *s, unsigned long long seq);
static void sw_reaped(syncer_t *s);
static void sw_unlink(syncer_t *s);

static void *syncer_main(void *arg) {
    syncer_t *s = (syncer_t *)arg;
    uint64_t one = 1;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        int fd;
        long long res;
        unsigned long long seq;
        sw_gate *gate;
        while (!s->flen && !s->stop)
            pthread_cond_wait(&s->cond, &s->lock);
        if (!s->flen)
            break;
        fd = s->fds[s->fhead];
        s->fhead = (s->fhead + 1) % SYNCER_DEPTH;
        s->flen--;
        seq = s->dequeued++;
        gate = s->gate;
        pthread_mutex_unlock(&s->lock);
        res = fdatasync(fd) == 0 ? 0 : -(long long)errno;
        close(fd);  /* the submitter's dup */
        if (res == 0 && gate != NULL)  /* the answers this sync made durable, written now if the reactor sleeps */
            sw_write(gate, s, seq);
        pthread_mutex_lock(&s->lock);
        s->results[(s->rhead + s->rlen) % SYNCER_DEPTH] = res;
        s->rlen++;
        pthread_mutex_unlock(&s->lock);
        while (write(s->efd, &one, sizeof one) < 0 && errno == EINTR)
            ;
        pthread_mutex_lock(&s->lock);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

static void syncer_join(syncer_t *s) {
    if (!s->started)
        return;
    pthread_mutex_lock(&s->lock);
    s->stop = 1;
    pthread_cond_signal(&s->cond);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL);
    s->started = 0;
}

static void syncer_free(PyObject *capsule) {
    syncer_t *s = (syncer_t *)PyCapsule_GetPointer(capsule, "rocketpy.syncer");
    if (s == NULL)
        return;
    sw_unlink(s);
    syncer_join(s);
    Py_CLEAR(s->gate_owner);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->cond);
    PyMem_RawFree(s);
}

static syncer_t *syncer_of(PyObject *capsule) {
    return (syncer_t *)PyCapsule_GetPointer(capsule, "rocketpy.syncer");
}

/* syncer_start(eventfd) -> syncer */
static PyObject *syncer_start(PyObject *self, PyObject *arg) {
    syncer_t *s;
    PyObject *capsule;
    long efd = PyLong_AsLong(arg);
    int err;
    if (efd == -1 && PyErr_Occurred())
        return NULL;
    s = (syncer_t *)PyMem_RawCalloc(1, sizeof(syncer_t));
    if (s == NULL)
        return PyErr_NoMemory();
    s->efd = (int)efd;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->cond, NULL);
    capsule = PyCapsule_New(s, "rocketpy.syncer", syncer_free);
    if (capsule == NULL) {
        pthread_mutex_destroy(&s->lock);
        pthread_cond_destroy(&s->cond);
        PyMem_RawFree(s);
        return NULL;
    }
    err = pthread_create(&s->thread, NULL, syncer_main, s);
    if (err != 0) {
        Py_DECREF(capsule);
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    s->started = 1;
    return capsule;
}

/* Queue an fdatasync of a dup of fd (the file may close meanwhile): 0, or -1 with errno set (EAGAIN: the
 * queue is full or the thread stopped). */
static int syncer_queue(syncer_t *s, int fd) {
    int copy = dup(fd), full;
    if (copy < 0)
        return -1;
    pthread_mutex_lock(&s->lock);
    full = !s->started || s->stop || s->flen + s->rlen >= SYNCER_DEPTH;
    if (!full) {
        s->fds[(s->fhead + s->flen) % SYNCER_DEPTH] = copy;
        s->flen++;
        pthread_cond_signal(&s->cond);
    }
    pthread_mutex_unlock(&s->lock);
    if (full) {
        close(copy);
        errno = EAGAIN;
        return -1;
    }
    return 0;
}

/* Move the finished syncs' results (0 or -errno, in order) into got; how many. With the GIL. */
static long syncer_take(syncer_t *s, long long *got) {
    long n = 0;
    pthread_mutex_lock(&s->lock);
    while (s->rlen) {
        got[n++] = s->results[s->rhead];
        s->rhead = (s->rhead + 1) % SYNCER_DEPTH;
        s->rlen--;
    }
    s->taken += n;
    pthread_mutex_unlock(&s->lock);
    if (n)
        sw_reaped(s);  /* the answers of these syncs the thread did not write: the reactor's now */
    return n;
}

/* syncer_submit(syncer, fd): queue an fdatasync of fd (of a dup of it: the file may close meanwhile) */
static PyObject *syncer_submit(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    syncer_t *s;
    long fd;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "syncer_submit(syncer, fd)");
        return NULL;
    }
    s = syncer_of(args[0]);
    fd = PyLong_AsLong(args[1]);
    if (s == NULL || (fd == -1 && PyErr_Occurred()))
        return NULL;
    if (syncer_queue(s, (int)fd) < 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    Py_RETURN_NONE;
}

/* syncer_reap(syncer) -> [result, ...]: the finished syncs' results (0 or -errno), in order */
static PyObject *syncer_reap(PyObject *self, PyObject *arg) {
    syncer_t *s = syncer_of(arg);
    long long got[SYNCER_DEPTH];
    if (s == NULL)
        return NULL;
    return results_list(got, syncer_take(s, got));
}

/* syncer_stop(syncer): finish the queued syncs, end the thread */
static PyObject *syncer_stop(PyObject *self, PyObject *arg) {
    syncer_t *s = syncer_of(arg);
    if (s == NULL)
        return NULL;
    sw_unlink(s);
    Py_BEGIN_ALLOW_THREADS
    syncer_join(s);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

#define AIO_METHODS                                                                                  \
    {"syncer_start", syncer_start, METH_O, "Start a native fdatasync thread signalling the eventfd."}, \
    {"syncer_submit", (PyCFunction)(void (*)(void))syncer_submit, METH_FASTCALL,                     \
     "Queue an fdatasync of fd on the native thread."},                                              \
    {"syncer_reap", syncer_reap, METH_O, "The finished syncs' results (0 or -errno)."},              \
    {"syncer_stop", syncer_stop, METH_O, "Finish the queued syncs and end the native thread."},
#else
#define AIO_METHODS
#endif
