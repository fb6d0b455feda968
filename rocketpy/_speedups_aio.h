/* rocketpy._speedups, the commit log's fdatasync completed on the reactor's epoll: included once
 * from _speedups.c.
 *
 * Two ways, each adding one to an eventfd the reactor watches when a sync ends
 * (rocketpy/store/aioflush.py), so that a SYNC_FLUSH group commit crosses no Python thread:
 * - aio_*: Linux AIO (io_setup(2), io_submit(2), io_getevents(2)) with IOCB_CMD_FDSYNC and
 *   IOCB_FLAG_RESFD; the kernel runs the fdatasync on a worker of its own. Kernels or files that
 *   refuse FDSYNC answer EINVAL at io_submit: the Python side then keeps its flush thread.
 * - syncer_*: a pthread of the process that runs fdatasync without the GIL (below).
 * Not Linux: no functions.
 */

#ifdef __linux__
#include <linux/aio_abi.h>
#include <sys/syscall.h>
#include <errno.h>
#include <time.h>

#define AIO_REAP_MAX 16

/* aio_setup(nr) -> context: io_setup(nr) */
static PyObject *aio_setup(PyObject *self, PyObject *arg) {
    aio_context_t ctx = 0;
    long nr = PyLong_AsLong(arg);
    if (nr == -1 && PyErr_Occurred())
        return NULL;
    if (syscall(SYS_io_setup, (unsigned)nr, &ctx) != 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    return PyLong_FromUnsignedLong((unsigned long)ctx);
}

/* aio_destroy(context): io_destroy (waits for what is in flight) */
static PyObject *aio_destroy(PyObject *self, PyObject *arg) {
    unsigned long ctx = PyLong_AsUnsignedLong(arg);
    long r;
    if (ctx == (unsigned long)-1 && PyErr_Occurred())
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    r = syscall(SYS_io_destroy, (aio_context_t)ctx);
    Py_END_ALLOW_THREADS
    if (r != 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    Py_RETURN_NONE;
}

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

/* aio_fdsync(context, fd, eventfd): submit one fdatasync of fd that signals eventfd when done */
static PyObject *aio_fdsync(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    struct iocb cb;
    struct iocb *cbs[1];
    unsigned long ctx;
    long fd, efd, r;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "aio_fdsync(context, fd, eventfd)");
        return NULL;
    }
    ctx = PyLong_AsUnsignedLong(args[0]);
    fd = PyLong_AsLong(args[1]);
    efd = PyLong_AsLong(args[2]);
    if (PyErr_Occurred())
        return NULL;
    memset(&cb, 0, sizeof cb);
    cb.aio_fildes = (uint32_t)fd;
    cb.aio_lio_opcode = IOCB_CMD_FDSYNC;
    cb.aio_flags = IOCB_FLAG_RESFD;
    cb.aio_resfd = (uint32_t)efd;
    cbs[0] = &cb;  /* the kernel copies the iocb: the stack is fine */
    r = syscall(SYS_io_submit, (aio_context_t)ctx, 1L, cbs);
    if (r != 1) {
        if (r == 0)
            errno = EAGAIN;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    Py_RETURN_NONE;
}

/* aio_reap(context) -> [result, ...]: the finished requests' results in completion order, without waiting */
static PyObject *aio_reap(PyObject *self, PyObject *arg) {
    struct io_event events[AIO_REAP_MAX];
    long long results[AIO_REAP_MAX];
    struct timespec zero = {0, 0};
    unsigned long ctx = PyLong_AsUnsignedLong(arg);
    long got, i;
    if (ctx == (unsigned long)-1 && PyErr_Occurred())
        return NULL;
    got = syscall(SYS_io_getevents, (aio_context_t)ctx, 0L, (long)AIO_REAP_MAX, events, &zero);
    if (got < 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    for (i = 0; i < got; i++)
        results[i] = (long long)events[i].res;
    return results_list(results, got);
}

/* The same contract on a native thread of our own (no Python, no GIL): syncer_start(eventfd)
 * starts a pthread that runs fdatasync for each syncer_submit(syncer, fd) in turn and adds one to
 * the eventfd after each; syncer_reap(syncer) -> [result, ...] as aio_reap; syncer_stop joins it.
 * Unlike AIO's kernel worker (bound to the submitting CPU, its time not the process's), the
 * scheduler may run it on any CPU, and its time counts as the broker's. */
#include <pthread.h>
#include <unistd.h>

#define SYNCER_DEPTH 8

typedef struct {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int efd, stop, started;
    int fds[SYNCER_DEPTH], fhead, flen;
    long long results[SYNCER_DEPTH];
    int rhead, rlen;
} syncer_t;

static void *syncer_main(void *arg) {
    syncer_t *s = (syncer_t *)arg;
    uint64_t one = 1;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        int fd;
        long long res;
        while (!s->flen && !s->stop)
            pthread_cond_wait(&s->cond, &s->lock);
        if (!s->flen)
            break;
        fd = s->fds[s->fhead];
        s->fhead = (s->fhead + 1) % SYNCER_DEPTH;
        s->flen--;
        pthread_mutex_unlock(&s->lock);
        res = fdatasync(fd) == 0 ? 0 : -(long long)errno;
        close(fd);  /* the submitter's dup */
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
    syncer_join(s);
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

/* syncer_submit(syncer, fd): queue an fdatasync of fd (of a dup of it: the file may close meanwhile) */
static PyObject *syncer_submit(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    syncer_t *s;
    long fd;
    int copy, full;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "syncer_submit(syncer, fd)");
        return NULL;
    }
    s = syncer_of(args[0]);
    fd = PyLong_AsLong(args[1]);
    if (s == NULL || (fd == -1 && PyErr_Occurred()))
        return NULL;
    copy = dup((int)fd);
    if (copy < 0)
        return PyErr_SetFromErrno(PyExc_OSError);
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
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    Py_RETURN_NONE;
}

/* syncer_reap(syncer) -> [result, ...]: the finished syncs' results (0 or -errno), in order */
static PyObject *syncer_reap(PyObject *self, PyObject *arg) {
    syncer_t *s = syncer_of(arg);
    long long got[SYNCER_DEPTH];
    long n = 0;
    if (s == NULL)
        return NULL;
    pthread_mutex_lock(&s->lock);
    while (s->rlen) {
        got[n++] = s->results[s->rhead];
        s->rhead = (s->rhead + 1) % SYNCER_DEPTH;
        s->rlen--;
    }
    pthread_mutex_unlock(&s->lock);
    return results_list(got, n);
}

/* syncer_stop(syncer): finish the queued syncs, end the thread */
static PyObject *syncer_stop(PyObject *self, PyObject *arg) {
    syncer_t *s = syncer_of(arg);
    if (s == NULL)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    syncer_join(s);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

#define AIO_METHODS                                                                                  \
    {"aio_setup", aio_setup, METH_O, "io_setup(nr): a Linux AIO context."},                          \
    {"aio_destroy", aio_destroy, METH_O, "io_destroy(context)."},                                    \
    {"aio_fdsync", (PyCFunction)(void (*)(void))aio_fdsync, METH_FASTCALL,                           \
     "Submit an IOCB_CMD_FDSYNC of fd that signals the eventfd when done."},                         \
    {"aio_reap", aio_reap, METH_O, "The finished requests' results (0 or -errno), without waiting."},                 \
    {"syncer_start", syncer_start, METH_O, "Start a native fdatasync thread signalling the eventfd."}, \
    {"syncer_submit", (PyCFunction)(void (*)(void))syncer_submit, METH_FASTCALL,                     \
     "Queue an fdatasync of fd on the native thread."},                                              \
    {"syncer_reap", syncer_reap, METH_O, "The finished syncs' results (0 or -errno)."},              \
    {"syncer_stop", syncer_stop, METH_O, "Finish the queued syncs and end the native thread."},
#else
#define AIO_METHODS
#endif
