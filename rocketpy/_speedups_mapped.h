/* The mapped files' zeros ahead: write_zeros (store/mappedfile.py MappedFile._write_zeros) writes
 * zeros over a range of a segment in 256 KiB pwrites, the GIL released once for the whole range. */

#include <unistd.h>

/* One pwrite's size: the page cache puts a write into folios no larger than it, and a flush's
 * writeback write-protects the whole folio holding its end, pages ahead of the writer included
 * (~4 faults per flush with 64 KiB folios, ~18 with 256 KiB, ~80 with 1 MiB), while smaller folios
 * cost the zeros and the populate more per page (1.6, 1.2 and 1.05 µs): doc/benchmarks.md,
 * "Thirty-sixth pass". */
#define ZEROS_CHUNK (256 * 1024)

static const char zeros_chunk[ZEROS_CHUNK];

/* write_zeros(fd, pos, stop) -> bool: zeros over [pos, stop) of descriptor ``fd``; False, writing
 * no more, at the first error (they are only a speed-up). */
static PyObject *write_zeros(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    int ok = 1;
    long fd;
    long long pos, stop;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "write_zeros(fd, pos, stop)");
        return NULL;
    }
    fd = PyLong_AsLong(args[0]);
    pos = PyLong_AsLongLong(args[1]);
    stop = PyLong_AsLongLong(args[2]);
    if (PyErr_Occurred())
        return NULL;
    if (fd < 0 || fd > INT_MAX) {
        PyErr_SetString(PyExc_ValueError, "bad file descriptor");
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    while (pos < stop) {
        size_t n = stop - pos < ZEROS_CHUNK ? (size_t)(stop - pos) : ZEROS_CHUNK;
        ssize_t written = pwrite((int)fd, zeros_chunk, n, (off_t)pos);
        if (written <= 0) {
            if (written < 0 && errno == EINTR)
                continue;
            ok = 0;
            break;
        }
        pos += written;
    }
    Py_END_ALLOW_THREADS
    return PyBool_FromLong(ok);
}
