/* rocketpy._speedups, a lone SYNC_FLUSH send's answer written by the native sync thread itself, right after
 * its fdatasync returned 0 (doc/store.md, "Group commit on the reactor"; doc/benchmarks.md, "Thirty-second
 * pass"): included once from _speedups.c after _speedups_syncanswer.h (its answer entries, sa_plain) and
 * _speedups_request.h (send_ready, write_rest), before _speedups_reactor.h, whose turn calls the gate's hooks.
 *
 * A gate belongs to one LeanEPollReactor's C turn (turn_gate) and to the native syncers linked to it
 * (syncer_direct). The turn says when its thread sleeps in epoll_wait (sw_before_wait ... sw_awake, under the
 * gate's lock): then that thread runs no Python and writes nothing. An answer queued on a sync
 * (sync_answer_later) is also armed here (sw_arm) when the sync thread may write it: the syncer is linked,
 * the request is the only one its connection waits for, a sync in flight covers it. Before each sleep the
 * reactor marks the armed answers whose connection has nothing queued in Twisted (send_ready) ready; the sync
 * thread, after a successful fdatasync, takes the lock with a trylock only, and while the reactor sleeps
 * sends the ready answers of that sync (one non-blocking send each, MSG_NOSIGNAL). The reactor, awake again
 * and before any Python runs (sw_after_wait), marks those entries written (their frame None: the store's
 * bookkeeping, sync_answer_reap and sync_answered then see the answer as written) and queues what a partial
 * send left through transport.write. Everything else stays the reactor's: an answer not written (the
 * reactor awake, the connection busy or closed, the send refused) is dropped here once its sync's result is
 * taken (sw_reaped) and written by sync_answer_reap as before; one taken back (a timeout) or written by the
 * reactor is forgotten first (sw_forget). The sync thread reads only C fields here (the descriptor, the
 * frame's bytes, kept alive by the record), never a Python object, and never waits for the reactor.
 */

#ifdef __linux__
#include <sys/socket.h>

#define SW_RECORDS 32

typedef struct {
    syncer_t *syncer;
    unsigned long long seq;  /* the sync (numbered on its syncer) whose success makes the answer durable */
    int fd, ready;           /* ready: nothing queued on the connection when the reactor went to sleep */
    const char *data;        /* the frame's bytes */
    Py_ssize_t size, sent;   /* sent: -1 until the sync thread sent (that many bytes) */
    PyObject *entry, *transport, *frame;  /* the reactor thread's, with the GIL */
} sw_record;

struct sw_gate {
    pthread_mutex_t lock;
    int asleep;  /* the reactor's thread is in epoll_wait */
    int wrote;   /* a record was sent since it last woke */
    int count;
    sw_record records[SW_RECORDS];
    struct sw_gate *next;  /* every gate, for sw_forget */
};

static sw_gate *sw_gates;  /* with the GIL */
static PyObject *str_unanswered, *str_fileno_method;

static sw_gate *sw_gate_new(void) {
    sw_gate *g = (sw_gate *)PyMem_RawCalloc(1, sizeof(sw_gate));
    if (g == NULL)
        return (sw_gate *)PyErr_NoMemory();
    pthread_mutex_init(&g->lock, NULL);
    g->next = sw_gates;
    sw_gates = g;
    return g;
}

/* Its syncers are gone (they keep its turn): no record is left. */
static void sw_gate_free(sw_gate *g) {
    sw_gate **at;
    for (at = &sw_gates; *at != NULL; at = &(*at)->next)
        if (*at == g) {
            *at = g->next;
            break;
        }
    pthread_mutex_destroy(&g->lock);
    PyMem_RawFree(g);
}

/* Take out of g the records of syncer whose sync is before ``before`` (entry NULL, sent_only 0), the record of
 * entry, or (sent_only) those the sync thread sent, into taken (room for SW_RECORDS): how many. The reactor
 * is awake, or the lock is held. */
static int sw_take(sw_gate *g, syncer_t *syncer, unsigned long long before, PyObject *entry, int sent_only,
                   sw_record *taken) {
    int i = 0, n = 0;
    while (i < g->count) {
        sw_record *r = &g->records[i];
        if (sent_only ? r->sent < 0 : entry != NULL ? r->entry != entry : r->syncer != syncer || r->seq >= before) {
            i++;
            continue;
        }
        taken[n++] = *r;
        memmove(r, r + 1, (size_t)(g->count - i - 1) * sizeof(sw_record));
        g->count--;
    }
    return n;
}

/* Taken records let go (with the GIL, no lock held): one the sync thread sent is settled first, its entry
 * written (frame None) and the rest of a partial send queued on the transport (nothing was written to it
 * since: the connection had nothing queued). */
static void sw_finish(sw_record *taken, int n) {
    int i;
    for (i = 0; i < n; i++) {
        sw_record *r = &taken[i];
        if (r->sent >= 0) {
            r->syncer->direct_written++;
            if (PyList_CheckExact(r->entry) && PyList_GET_SIZE(r->entry) == SA_ITEMS)
                PyList_SetItem(r->entry, SA_FRAME, Py_NewRef(Py_None));
            if (write_rest(r->transport, r->frame, r->sent) < 0)
                PyErr_WriteUnraisable(r->transport);
        }
        Py_DECREF(r->entry);
        Py_DECREF(r->transport);
        Py_DECREF(r->frame);
    }
}

/* Drop records as sw_take selects them (the reactor awake). */
static void sw_drop(sw_gate *g, syncer_t *syncer, unsigned long long before, PyObject *entry, int sent_only) {
    sw_record taken[SW_RECORDS];
    sw_finish(taken, sw_take(g, syncer, before, entry, sent_only, taken));
}

/* The reactor goes to sleep in epoll_wait (with the GIL, before releasing it): the armed answers whose
 * connection has nothing queued are ready, then the gate says it sleeps. */
static void sw_before_wait(sw_gate *g) {
    int i;
    for (i = 0; i < g->count; i++) {
        sw_record *r = &g->records[i];
        PyObject *fd;
        r->ready = 0;
        if (r->sent >= 0 || !send_ready(sa_plain, r->transport, r->size))
            continue;
        fd = PyObject_CallMethodNoArgs(r->transport, str_fileno_method);  /* still the socket armed */
        r->ready = fd != NULL && PyLong_CheckExact(fd) && PyLong_AsLong(fd) == r->fd;
        Py_XDECREF(fd);
        PyErr_Clear();
    }
    pthread_mutex_lock(&g->lock);
    g->asleep = 1;
    pthread_mutex_unlock(&g->lock);
}

/* The reactor's epoll_wait returned (without the GIL): from here its thread writes again. Waits only while
 * the sync thread sends. */
static void sw_awake(sw_gate *g) {
    pthread_mutex_lock(&g->lock);
    g->asleep = 0;
    pthread_mutex_unlock(&g->lock);
}

/* With the GIL again, before any Python: the answers the sync thread sent, settled. The eventfd of the sync
 * thread that sent the first of them, or -1: the turn handles that event first (the put's bookkeeping before
 * a next request read in the same turn, which then finds its connection waiting for it alone). */
static int sw_after_wait(sw_gate *g) {
    sw_record taken[SW_RECORDS];
    int n;
    if (!g->wrote)
        return -1;
    g->wrote = 0;
    n = sw_take(g, NULL, 0, NULL, 1, taken);
    sw_finish(taken, n);
    return n > 0 ? taken[0].syncer->efd : -1;
}

/* The sync thread, sync seq of s succeeded: while the reactor sleeps, send its ready answers. */
static void sw_write(sw_gate *g, syncer_t *s, unsigned long long seq) {
    int i;
    if (pthread_mutex_trylock(&g->lock) != 0)
        return;  /* the reactor is waking or going to sleep: its answers */
    if (g->asleep) {
        for (i = 0; i < g->count; i++) {
            sw_record *r = &g->records[i];
            ssize_t n;
            if (r->syncer != s || r->seq != seq || !r->ready || r->sent >= 0)
                continue;
            do
                n = send(r->fd, r->data, (size_t)r->size, MSG_DONTWAIT | MSG_NOSIGNAL);
            while (n < 0 && errno == EINTR);
            if (n > 0) {
                r->sent = n;
                g->wrote = 1;
            }
            if (n != r->size)
                break;  /* refused or partial: the rest is the reactor's */
        }
    }
    pthread_mutex_unlock(&g->lock);
}

/* The results of s's syncs before s->taken were taken: their records not sent are the reactor's now. */
static void sw_reaped(syncer_t *s) {
    if (s->gate != NULL)
        sw_drop(s->gate, s, s->taken, NULL, 0);
}

/* An entry the reactor writes or takes back: the sync thread must not send it (the reactor is awake). */
static void sw_forget(PyObject *entry) {
    sw_gate *g;
    for (g = sw_gates; g != NULL; g = g->next)
        if (g->count)
            sw_drop(g, NULL, 0, entry, 0);
}

/* s stops: its records dropped (taken under the lock: any thread may stop it), the thread left without a
 * gate. */
static void sw_unlink(syncer_t *s) {
    sw_gate *g = s->gate;
    sw_record taken[SW_RECORDS];
    int n;
    if (g == NULL)
        return;
    pthread_mutex_lock(&s->lock);
    s->gate = NULL;
    pthread_mutex_unlock(&s->lock);
    pthread_mutex_lock(&g->lock);
    n = sw_take(g, s, (unsigned long long)-1, NULL, 0, taken);
    pthread_mutex_unlock(&g->lock);
    sw_finish(taken, n);
}

/* Arm a queued answer (sync_answer_later's entry [offset, transport, frame]) for the sync thread: direct is
 * AioFdSync.direct, (syncer, covers) (covers: the log offset each sync in flight covers, in order), channel
 * the request's RemotingProtocol. Nothing when anything does not fit (the reactor then writes it as before). */
static void sw_arm(PyObject *direct, PyObject *channel, PyObject *transport, PyObject *entry) {
    PyObject *covers, *frame = PyList_GET_ITEM(entry, SA_FRAME), *fd_obj = NULL;
    syncer_t *s;
    sw_gate *g;
    sw_record *r;
    int64_t offset, unanswered, covered;
    long fd;
    Py_ssize_t i;
    if (str_unanswered == NULL && ((str_unanswered = PyUnicode_InternFromString("_unanswered")) == NULL ||
                                   (str_fileno_method = PyUnicode_InternFromString("fileno")) == NULL))
        goto done;
    if (!PyTuple_CheckExact(direct) || PyTuple_GET_SIZE(direct) != 2 ||
        !PyList_CheckExact(covers = PyTuple_GET_ITEM(direct, 1)) || !PyBytes_CheckExact(frame) ||
        (s = syncer_of(PyTuple_GET_ITEM(direct, 0))) == NULL || (g = s->gate) == NULL || g->count >= SW_RECORDS ||
        !I64_OK(PyList_GET_ITEM(entry, SA_OFFSET), &offset))
        goto done;
    /* answered before every later request of its connection, after every earlier one */
    if (!exact_int_attr(channel, str_unanswered, &unanswered) || unanswered != 1)
        goto done;
    for (i = 0; i < PyList_GET_SIZE(covers); i++)  /* the first sync in flight that covers it */
        if (I64_OK(PyList_GET_ITEM(covers, i), &covered) && covered >= offset)
            break;
    if (i == PyList_GET_SIZE(covers))
        goto done;
    fd_obj = PyObject_CallMethodNoArgs(transport, str_fileno_method);
    if (fd_obj == NULL || !PyLong_CheckExact(fd_obj) || (fd = PyLong_AsLong(fd_obj)) < 0 || fd > INT_MAX)
        goto done;
    r = &g->records[g->count++];  /* the reactor is awake: the sync thread reads no record now */
    r->syncer = s;
    r->seq = s->taken + (unsigned long long)i;
    r->fd = (int)fd;
    r->ready = 0;
    r->data = PyBytes_AS_STRING(frame);
    r->size = PyBytes_GET_SIZE(frame);
    r->sent = -1;
    r->entry = Py_NewRef(entry);
    r->transport = Py_NewRef(transport);
    r->frame = Py_NewRef(frame);
done:
    Py_XDECREF(fd_obj);
    PyErr_Clear();
}

/* syncer_direct(syncer, turn) -> bool: link a native syncer to a LeanEPollReactor's C turn (its sync thread
 * then writes the armed answers itself while that reactor sleeps); False where turn is not one. */
static sw_gate *turn_gate(PyObject *turn);  /* _speedups_reactor.h */

static PyObject *syncer_direct(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    syncer_t *s;
    sw_gate *g;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "syncer_direct(syncer, turn)");
        return NULL;
    }
    if ((s = syncer_of(args[0])) == NULL)
        return NULL;
    if (s->gate != NULL)
        Py_RETURN_TRUE;
    if ((g = turn_gate(args[1])) == NULL) {
        if (PyErr_Occurred())
            return NULL;
        Py_RETURN_FALSE;
    }
    Py_XSETREF(s->gate_owner, Py_NewRef(args[1]));
    pthread_mutex_lock(&s->lock);
    s->gate = g;
    pthread_mutex_unlock(&s->lock);
    Py_RETURN_TRUE;
}

/* syncer_written(syncer) -> int: the answers its thread wrote itself */
static PyObject *syncer_written(PyObject *self, PyObject *arg) {
    syncer_t *s = syncer_of(arg);
    return s == NULL ? NULL : PyLong_FromLongLong(s->direct_written);
}

#define SYNC_WRITE_METHODS \
    {"syncer_direct", (PyCFunction)(void (*)(void))syncer_direct, METH_FASTCALL, \
     "Link a native syncer to a lean reactor's C turn: its thread writes lone answers itself."}, \
    {"syncer_written", syncer_written, METH_O, "How many answers a native syncer's thread wrote itself."},
#else
#define SYNC_WRITE_METHODS
#endif
