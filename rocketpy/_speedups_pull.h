/* rocketpy._speedups, the pull path's part: included once from _speedups.c.
 *
 * pull_collect is the per-entry loop of rocketpy.store.reads.MessageReader._collect (the
 * reference) for the entries whose records lie in one commit-log file: it walks the consume-queue
 * entries, applies the same transfer limits and filters (calling the Python filters it is given)
 * and copies each record out of the file's mmap, appending it to the result's records. It stops,
 * without consuming it, at the first entry it cannot serve from that file (another file, beyond
 * the written position, a non-positive size, a closed map), and the Python step takes that entry.
 * resident is mincore(2) for a file range: whether reading it can fault on the disk.
 */

#include <sys/mman.h>
#include <unistd.h>

/* pull_collect's states (rocketpy.store.reads mirrors them) */
#define PULL_END 0       /* every entry scanned */
#define PULL_LIMIT 1     /* stopped by a count or byte limit, as the reference's break */
#define PULL_PYTHON 2    /* the entry at pos is for the Python step */
#define PULL_ON_DISK 3   /* (resident_only) a record's pages are not all in memory */
#define RESIDENT_WINDOW (256 * 1024)

/* 1 when every page of [at, at + length) of a mapping starting at base is resident, 0 when one is
 * not, -1 when mincore fails (the caller treats it as not resident). */
static int pages_resident(const char *base, Py_ssize_t at, Py_ssize_t length) {
    static long page = 0;
    unsigned char vec[64];
    uintptr_t start, end;
    if (page <= 0)
        page = sysconf(_SC_PAGESIZE);
    if (page <= 0 || length <= 0)
        return page > 0;
    start = ((uintptr_t)(base + at)) & ~((uintptr_t)page - 1);
    end = (uintptr_t)(base + at + length);
    while (start < end) {
        uintptr_t chunk = end - start, n, i;
        if (chunk > 64 * (uintptr_t)page)
            chunk = 64 * (uintptr_t)page;
        n = (chunk + (uintptr_t)page - 1) / (uintptr_t)page;
        if (mincore((void *)start, (size_t)chunk, vec) != 0)
            return -1;
        for (i = 0; i < n; i++)
            if (!(vec[i] & 1))
                return 0;
        start += n * (uintptr_t)page;
    }
    return 1;
}

/* resident(map, position, length) -> bool: the bytes [position, position + length) of an mmap
 * are in memory now (False also when the range is outside the map or the map is closed). */
static PyObject *resident(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Py_buffer view;
    Py_ssize_t position, length;
    int ok;
    if (nargs != 3)
        return PyErr_Format(PyExc_TypeError, "resident() takes 3 arguments");
    position = PyLong_AsSsize_t(args[1]);
    length = PyLong_AsSsize_t(args[2]);
    if ((position == -1 || length == -1) && PyErr_Occurred())
        return NULL;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) != 0) {
        PyErr_Clear();  /* closed by retention meanwhile */
        Py_RETURN_FALSE;
    }
    ok = position >= 0 && length >= 0 && position <= view.len - length &&
         pages_resident((const char *)view.buf, position, length) == 1;
    PyBuffer_Release(&view);
    return PyBool_FromLong(ok);
}

static int64_t be64(const unsigned char *p) {
    return (int64_t)(((uint64_t)p[0] << 56) | ((uint64_t)p[1] << 48) | ((uint64_t)p[2] << 40) |
                     ((uint64_t)p[3] << 32) | ((uint64_t)p[4] << 24) | ((uint64_t)p[5] << 16) |
                     ((uint64_t)p[6] << 8) | (uint64_t)p[7]);
}

/* Calls filter(value) (value is stolen); 1 if it returned a true value, 0 if false, -1 on error. */
static int filter_accepts(PyObject *filter, PyObject *value) {
    PyObject *answer;
    int truth;
    if (value == NULL)
        return -1;
    answer = PyObject_CallOneArg(filter, value);
    Py_DECREF(value);
    if (answer == NULL)
        return -1;
    truth = PyObject_IsTrue(answer);
    Py_DECREF(answer);
    return truth;
}

/* pull_collect(entries, pos, records, total_bytes, next_file_start, max_msg_nums, tag_filter,
 *              record_filter, limits, log_map, log_from, log_wrote, resident_only)
 *   -> (pos, total_bytes, next_file_start, last_phy, state)
 *
 * limits: (max_phy, memory_limit, disk_bytes, disk_count, memory_bytes, memory_count).
 * last_phy is LLONG_MIN when no entry was looked at (a corrupt entry can hold -1). The map's buffer is held only while no Python code
 * can run (not across the filters' calls): retention may close the map from another thread, and
 * an export would make its close fail. */
static PyObject *pull_collect(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Py_buffer entries, log;
    PyObject *records, *tag_filter, *record_filter, *limits;
    Py_ssize_t pos, limit, count, max_msg_nums;
    long long total_bytes, next_file_start, log_from, log_wrote, last_phy = LLONG_MIN, checked_from = 0, checked_to = 0;
    long long max_phy, memory_limit, disk_bytes, disk_count, memory_bytes, memory_count;
    int resident_only, state = PULL_END, have_log = 0;
    const unsigned char *e;
    if (nargs != 13)
        return PyErr_Format(PyExc_TypeError, "pull_collect() takes 13 arguments");
    records = args[2];
    tag_filter = args[6];
    record_filter = args[7];
    limits = args[8];
    if (!PyList_CheckExact(records) || !PyTuple_CheckExact(limits) || PyTuple_GET_SIZE(limits) != 6)
        return PyErr_Format(PyExc_TypeError, "pull_collect(): records must be a list, limits a 6-tuple");
    pos = PyLong_AsSsize_t(args[1]);
    total_bytes = PyLong_AsLongLong(args[3]);
    next_file_start = PyLong_AsLongLong(args[4]);
    max_msg_nums = PyLong_AsSsize_t(args[5]);
    log_from = PyLong_AsLongLong(args[10]);
    log_wrote = PyLong_AsLongLong(args[11]);
    max_phy = PyLong_AsLongLong(PyTuple_GET_ITEM(limits, 0));
    memory_limit = PyLong_AsLongLong(PyTuple_GET_ITEM(limits, 1));
    disk_bytes = PyLong_AsLongLong(PyTuple_GET_ITEM(limits, 2));
    disk_count = PyLong_AsLongLong(PyTuple_GET_ITEM(limits, 3));
    memory_bytes = PyLong_AsLongLong(PyTuple_GET_ITEM(limits, 4));
    memory_count = PyLong_AsLongLong(PyTuple_GET_ITEM(limits, 5));
    resident_only = PyObject_IsTrue(args[12]);
    if (PyErr_Occurred() || resident_only < 0)
        return NULL;
    if (pos < 0)
        return PyErr_Format(PyExc_ValueError, "pull_collect(): negative position");
    if (PyObject_GetBuffer(args[0], &entries, PyBUF_SIMPLE) != 0)
        return NULL;
    limit = entries.len;
    e = (const unsigned char *)entries.buf;
    while (pos < limit) {
        long long phy, size, at;
        int32_t size32;
        int accepted;
        PyObject *data;
        if (limit - pos < 20) {  /* a torn entry: the reference's unpack raises */
            state = PULL_PYTHON;
            break;
        }
        phy = be64(e + pos);
        size32 = (int32_t)(((uint32_t)e[pos + 8] << 24) | ((uint32_t)e[pos + 9] << 16) |
                           ((uint32_t)e[pos + 10] << 8) | (uint32_t)e[pos + 11]);
        size = size32;
        at = phy - log_from;
        if (phy < next_file_start) {  /* in a file found missing: skipped, as the reference */
            last_phy = phy;
            pos += 20;
            continue;
        }
        if (!have_log) {
            if (PyObject_GetBuffer(args[9], &log, PyBUF_SIMPLE) != 0) {  /* closed: the Python step decides */
                PyErr_Clear();
                state = PULL_PYTHON;
                break;
            }
            have_log = 1;
            if (log_wrote > log.len)
                log_wrote = log.len;
        }
        if (size <= 0 || at < 0 || at > log_wrote - size) {
            state = PULL_PYTHON;
            break;
        }
        last_phy = phy;
        count = PyList_GET_SIZE(records);
        if (count) {
            int on_disk = max_phy - phy > memory_limit;
            long long max_bytes = on_disk ? disk_bytes : memory_bytes, max_count = on_disk ? disk_count : memory_count;
            if (count >= max_msg_nums || count >= max_count || total_bytes + size > max_bytes) {
                state = PULL_LIMIT;
                break;
            }
        }
        pos += 20;
        if (tag_filter != Py_None) {
            PyBuffer_Release(&log);
            have_log = 0;
            accepted = filter_accepts(tag_filter, PyLong_FromLongLong(be64(e + pos - 8)));
            if (accepted <= 0) {
                if (accepted < 0)
                    goto error;
                continue;
            }
            if (PyObject_GetBuffer(args[9], &log, PyBUF_SIMPLE) != 0) {  /* closed meanwhile */
                PyErr_Clear();
                pos -= 20;  /* the Python step takes this entry again: the filters are pure */
                state = PULL_PYTHON;
                break;
            }
            have_log = 1;
        }
        if (resident_only && (at < checked_from || at + size > checked_to)) {
            /* one mincore for the next RESIDENT_WINDOW bytes (the records of a pull are near
             * each other in the log), else for this record alone */
            long long to = at + RESIDENT_WINDOW < log_wrote ? at + RESIDENT_WINDOW : log_wrote;
            if (pages_resident((const char *)log.buf, (Py_ssize_t)at, (Py_ssize_t)(to - at)) == 1) {
                checked_from = at;
                checked_to = to;
            } else if (pages_resident((const char *)log.buf, (Py_ssize_t)at, (Py_ssize_t)size) != 1) {
                state = PULL_ON_DISK;
                break;
            }
        }
        data = PyBytes_FromStringAndSize((const char *)log.buf + at, (Py_ssize_t)size);
        if (data == NULL)
            goto error;
        next_file_start = -1;
        if (record_filter != Py_None) {
            PyBuffer_Release(&log);
            have_log = 0;
            Py_INCREF(data);
            accepted = filter_accepts(record_filter, data);
            if (accepted <= 0) {
                Py_DECREF(data);
                if (accepted < 0)
                    goto error;
                continue;
            }
        }
        if (PyList_Append(records, data) != 0) {
            Py_DECREF(data);
            goto error;
        }
        Py_DECREF(data);
        total_bytes += size;
    }
    if (have_log)
        PyBuffer_Release(&log);
    PyBuffer_Release(&entries);
    return Py_BuildValue("nLLLi", pos, total_bytes, next_file_start, last_phy, state);
error:
    if (have_log)
        PyBuffer_Release(&log);
    PyBuffer_Release(&entries);
    return NULL;
}

/* pull_collect and resident's entries in the module's method table */
#define PULL_METHODS                                                                      \
    {"pull_collect", (PyCFunction)(void (*)(void))pull_collect, METH_FASTCALL,            \
     "C loop of rocketpy.store.reads.MessageReader._collect over one commit-log file."}, \
    {"resident", (PyCFunction)(void (*)(void))resident, METH_FASTCALL,                    \
     "Whether a range of an mmap is in memory (mincore)."},
