/* rocketpy._speedups, the commit log's fdatasync through io_uring: included once from _speedups.c.
 *
 * uring_*: an io_uring (io_uring_setup(2), io_uring_enter(2), the rings mmap'ed here: no liburing)
 * whose completions signal an eventfd the reactor watches (rocketpy/store/aioflush.py, "uring").
 * The reactor submits an IORING_OP_FSYNC with IORING_FSYNC_DATASYNC in one system call; the kernel
 * runs it on an io-wq worker (a thread of this process, so its CPU counts as the broker's) and
 * posts the result to the completion ring, read here without a system call.
 * The descriptor is dup'ed at submission and closed when its completion is reaped: the worker looks
 * it up when it runs, and the store may close the file meanwhile.
 * Kernels without io_uring (ENOSYS) or where it is off (EPERM, kernel.io_uring_disabled) fail
 * uring_setup with OSError; no Linux or no <linux/io_uring.h> at build time: no functions.
 */

#if defined(__linux__) && defined(__has_include)
#if __has_include(<linux/io_uring.h>)
#include <linux/io_uring.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#if defined(__NR_io_uring_setup) && defined(__NR_io_uring_enter) && defined(__NR_io_uring_register)
#define ROCKETPY_URING 1
#endif
#endif
#endif

#ifdef ROCKETPY_URING

#define URING_ENTRIES 8

typedef struct {
    int fd;
    void *sq_ring, *cq_ring;
    size_t sq_ring_size, cq_ring_size;
    struct io_uring_sqe *sqes;
    size_t sqes_size;
    unsigned *sq_head, *sq_tail, *sq_mask, *sq_array;
    unsigned *cq_head, *cq_tail, *cq_mask;
    struct io_uring_cqe *cqes;
    unsigned in_flight;
} uring_t;

static void uring_unmap(uring_t *r) {
    if (r->sqes != NULL && r->sqes != MAP_FAILED)
        munmap(r->sqes, r->sqes_size);
    if (r->cq_ring != NULL && r->cq_ring != MAP_FAILED && r->cq_ring != r->sq_ring)
        munmap(r->cq_ring, r->cq_ring_size);
    if (r->sq_ring != NULL && r->sq_ring != MAP_FAILED)
        munmap(r->sq_ring, r->sq_ring_size);
    r->sqes = NULL;
    r->sq_ring = r->cq_ring = NULL;
    if (r->fd >= 0)
        close(r->fd);  /* the kernel finishes what is in flight on its own */
    r->fd = -1;
}

/* the completions' results (0 or -errno), in order, closing each request's dup'ed descriptor */
static long uring_reap_into(uring_t *r, long long *results, long max) {
    unsigned head = *r->cq_head;
    unsigned tail = __atomic_load_n(r->cq_tail, __ATOMIC_ACQUIRE);
    long n = 0;
    while (head != tail && n < max) {
        struct io_uring_cqe *cqe = &r->cqes[head & *r->cq_mask];
        results[n++] = cqe->res;
        close((int)cqe->user_data);
        head++;
        r->in_flight--;
    }
    __atomic_store_n(r->cq_head, head, __ATOMIC_RELEASE);
    return n;
}

static void uring_free(PyObject *capsule) {
    uring_t *r = (uring_t *)PyCapsule_GetPointer(capsule, "rocketpy.uring");
    if (r == NULL)
        return;
    uring_unmap(r);
    PyMem_RawFree(r);
}

static uring_t *uring_of(PyObject *capsule) {
    uring_t *r = (uring_t *)PyCapsule_GetPointer(capsule, "rocketpy.uring");
    if (r != NULL && r->fd < 0) {
        errno = EBADF;
        PyErr_SetFromErrno(PyExc_OSError);
        return NULL;
    }
    return r;
}

/* uring_setup(eventfd) -> ring: a small ring whose completions signal eventfd */
static PyObject *uring_setup(PyObject *self, PyObject *arg) {
    struct io_uring_params p;
    uring_t *r;
    PyObject *capsule;
    int efd;
    long value = PyLong_AsLong(arg);
    if (value == -1 && PyErr_Occurred())
        return NULL;
    efd = (int)value;
    r = (uring_t *)PyMem_RawCalloc(1, sizeof(uring_t));
    if (r == NULL)
        return PyErr_NoMemory();
    memset(&p, 0, sizeof p);
    r->fd = (int)syscall(__NR_io_uring_setup, URING_ENTRIES, &p);
    if (r->fd < 0)
        goto fail;
    r->sq_ring_size = p.sq_off.array + p.sq_entries * sizeof(unsigned);
    r->cq_ring_size = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
    if (p.features & IORING_FEAT_SINGLE_MMAP) {
        if (r->cq_ring_size > r->sq_ring_size)
            r->sq_ring_size = r->cq_ring_size;
        r->cq_ring_size = r->sq_ring_size;
    }
    r->sq_ring = mmap(NULL, r->sq_ring_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, r->fd,
                      IORING_OFF_SQ_RING);
    if (r->sq_ring == MAP_FAILED)
        goto fail;
    if (p.features & IORING_FEAT_SINGLE_MMAP)
        r->cq_ring = r->sq_ring;
    else {
        r->cq_ring = mmap(NULL, r->cq_ring_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, r->fd,
                          IORING_OFF_CQ_RING);
        if (r->cq_ring == MAP_FAILED)
            goto fail;
    }
    r->sqes_size = p.sq_entries * sizeof(struct io_uring_sqe);
    r->sqes = (struct io_uring_sqe *)mmap(NULL, r->sqes_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
                                          r->fd, IORING_OFF_SQES);
    if (r->sqes == MAP_FAILED)
        goto fail;
    r->sq_head = (unsigned *)((char *)r->sq_ring + p.sq_off.head);
    r->sq_tail = (unsigned *)((char *)r->sq_ring + p.sq_off.tail);
    r->sq_mask = (unsigned *)((char *)r->sq_ring + p.sq_off.ring_mask);
    r->sq_array = (unsigned *)((char *)r->sq_ring + p.sq_off.array);
    r->cq_head = (unsigned *)((char *)r->cq_ring + p.cq_off.head);
    r->cq_tail = (unsigned *)((char *)r->cq_ring + p.cq_off.tail);
    r->cq_mask = (unsigned *)((char *)r->cq_ring + p.cq_off.ring_mask);
    r->cqes = (struct io_uring_cqe *)((char *)r->cq_ring + p.cq_off.cqes);
    if (syscall(__NR_io_uring_register, r->fd, IORING_REGISTER_EVENTFD, &efd, 1) != 0)
        goto fail;
    capsule = PyCapsule_New(r, "rocketpy.uring", uring_free);
    if (capsule == NULL) {
        uring_unmap(r);
        PyMem_RawFree(r);
    }
    return capsule;
fail:
    PyErr_SetFromErrno(PyExc_OSError);
    uring_unmap(r);
    PyMem_RawFree(r);
    return NULL;
}

/* uring_fdsync(ring, fd): submit an fdatasync of fd (of a dup of it) */
static PyObject *uring_fdsync(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    uring_t *r;
    struct io_uring_sqe *sqe;
    unsigned tail, index;
    long fd;
    int copy;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "uring_fdsync(ring, fd)");
        return NULL;
    }
    r = uring_of(args[0]);
    fd = PyLong_AsLong(args[1]);
    if (r == NULL || (fd == -1 && PyErr_Occurred()))
        return NULL;
    if (r->in_flight >= URING_ENTRIES) {  /* the completion ring could overflow */
        errno = EAGAIN;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    copy = fcntl((int)fd, F_DUPFD_CLOEXEC, 0);
    if (copy < 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    tail = *r->sq_tail;  /* only this thread writes the tail */
    index = tail & *r->sq_mask;
    sqe = &r->sqes[index];
    memset(sqe, 0, sizeof *sqe);
    sqe->opcode = IORING_OP_FSYNC;
    sqe->fd = copy;
    sqe->fsync_flags = IORING_FSYNC_DATASYNC;
    sqe->user_data = (unsigned long long)copy;
    r->sq_array[index] = index;
    __atomic_store_n(r->sq_tail, tail + 1, __ATOMIC_RELEASE);
    if (syscall(__NR_io_uring_enter, r->fd, 1, 0, 0, NULL, 0) != 1) {
        int err = errno;
        /* not consumed (an error before the kernel read the entry): take it back */
        if (__atomic_load_n(r->sq_head, __ATOMIC_ACQUIRE) == tail)
            __atomic_store_n(r->sq_tail, tail, __ATOMIC_RELEASE);
        close(copy);
        errno = err ? err : EAGAIN;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    r->in_flight++;
    Py_RETURN_NONE;
}

/* uring_reap(ring) -> [result, ...]: the finished syncs' results (0 or -errno), without waiting */
static PyObject *uring_reap(PyObject *self, PyObject *arg) {
    long long results[URING_ENTRIES * 2];
    long n;
    uring_t *r = uring_of(arg);
    if (r == NULL)
        return NULL;
    n = uring_reap_into(r, results, URING_ENTRIES * 2);
    return results_list(results, n);
}

/* uring_close(ring): wait for the syncs in flight (without the GIL), then close the ring */
static PyObject *uring_close(PyObject *self, PyObject *arg) {
    long long results[URING_ENTRIES * 2];
    uring_t *r = (uring_t *)PyCapsule_GetPointer(arg, "rocketpy.uring");
    if (r == NULL)
        return NULL;
    while (r->fd >= 0 && r->in_flight) {
        long got;
        Py_BEGIN_ALLOW_THREADS
        got = syscall(__NR_io_uring_enter, r->fd, 0, r->in_flight, IORING_ENTER_GETEVENTS, NULL, 0);
        Py_END_ALLOW_THREADS
        if (got < 0 && errno != EINTR)
            break;
        uring_reap_into(r, results, URING_ENTRIES * 2);  /* closes the dups of what ended */
    }
    uring_unmap(r);
    Py_RETURN_NONE;
}

#define URING_METHODS                                                                                 \
    {"uring_setup", uring_setup, METH_O, "An io_uring whose completions signal the eventfd."},        \
    {"uring_fdsync", (PyCFunction)(void (*)(void))uring_fdsync, METH_FASTCALL,                        \
     "Submit an IORING_OP_FSYNC (DATASYNC) of fd."},                                                  \
    {"uring_reap", uring_reap, METH_O, "The finished syncs' results (0 or -errno), without waiting."}, \
    {"uring_close", uring_close, METH_O, "Close the ring."},
#else
#define URING_METHODS
#endif
