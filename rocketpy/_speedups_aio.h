/* rocketpy._speedups, the commit log's asynchronous fdatasync: included once from _speedups.c.
 *
 * Linux AIO (io_setup(2), io_submit(2), io_getevents(2)) with IOCB_CMD_FDSYNC: the kernel runs
 * the fdatasync on a worker of its own and, with IOCB_FLAG_RESFD, adds one to an eventfd when it
 * ends. The store service (rocketpy/store/aioflush.py) registers that eventfd with the reactor, so
 * a SYNC_FLUSH group commit needs no Python thread: the reactor submits, goes back to epoll, and
 * reaps the result when the eventfd is readable. Kernels or files that refuse FDSYNC answer
 * EINVAL at io_submit: the Python side then keeps its flush thread. Not Linux: no functions.
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

/* aio_fdsync(context, fd, eventfd): submit one fdatasync of fd that signals eventfd when done */
static PyObject *aio_fdsync(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    struct iocb cb;
    struct iocb *cbs[1];
    unsigned long ctx;
    long fd, efd;
    long r;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "aio_fdsync(context, fd, eventfd)");
        return NULL;
    }
    ctx = PyLong_AsUnsignedLong(args[0]);
    if (ctx == (unsigned long)-1 && PyErr_Occurred())
        return NULL;
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

/* aio_reap(context, wait) -> [result, ...]: the finished requests' results (0, or -errno) in
 * completion order; with wait true, blocks (without the GIL) until at least one has finished. */
static PyObject *aio_reap(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    struct io_event events[AIO_REAP_MAX];
    struct timespec zero = {0, 0};
    unsigned long ctx;
    int wait;
    long got, i;
    PyObject *out;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "aio_reap(context, wait)");
        return NULL;
    }
    ctx = PyLong_AsUnsignedLong(args[0]);
    if (ctx == (unsigned long)-1 && PyErr_Occurred())
        return NULL;
    wait = PyObject_IsTrue(args[1]);
    if (wait < 0)
        return NULL;
    if (wait) {
        Py_BEGIN_ALLOW_THREADS
        do {
            got = syscall(SYS_io_getevents, (aio_context_t)ctx, 1L, (long)AIO_REAP_MAX, events, NULL);
        } while (got < 0 && errno == EINTR);
        Py_END_ALLOW_THREADS
    } else {
        got = syscall(SYS_io_getevents, (aio_context_t)ctx, 0L, (long)AIO_REAP_MAX, events, &zero);
    }
    if (got < 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    out = PyList_New(got);
    if (out == NULL)
        return NULL;
    for (i = 0; i < got; i++) {
        PyObject *res = PyLong_FromLongLong((long long)events[i].res);
        if (res == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, res);
    }
    return out;
}

#define AIO_METHODS                                                                                  \
    {"aio_setup", aio_setup, METH_O, "io_setup(nr): a Linux AIO context."},                          \
    {"aio_destroy", aio_destroy, METH_O, "io_destroy(context)."},                                    \
    {"aio_fdsync", (PyCFunction)(void (*)(void))aio_fdsync, METH_FASTCALL,                           \
     "Submit an IOCB_CMD_FDSYNC of fd that signals the eventfd when done."},                         \
    {"aio_reap", (PyCFunction)(void (*)(void))aio_reap, METH_FASTCALL,                              \
     "The finished requests' results (0 or -errno); wait: block for at least one."},
#else
#define AIO_METHODS
#endif
