/* rocketpy._speedups, the reactor's turn (rocketpy/remoting/reactor.py, LeanEPollReactor): included once
 * from _speedups.c. The Python doPoll and _read there are the reference, and the fallback.
 *
 * reactor_turn(...) -> ReactorTurn, whose poll(timeout) is LeanEPollReactor.doPoll: epoll_wait without the
 * GIL, then per event what doPoll does: a read alone (EPOLLIN) on a plain TCP connection received with
 * socket.recv and given to the protocol's dataReceived inside the connection's log context (one prepared
 * context per connection, kept on it and rebuilt when the reactor's outer context or the connection's log
 * prefix changes); its end (no data, a lost socket, an exception) handed to the reactor's _read_ended; every
 * other event is log.callWithLogger(selectable, _doReadOrWrite, selectable, fd, event) with callWithLogger's part
 * done here (turn_other).
 * ReactorTurn.run(reactor, poll, seconds, run_due, timeout) is LeanEPollReactor.mainLoop's inner loop with that
 * poll. Not Linux: no functions.
 */

#ifdef __linux__
#include <math.h>
#include <sys/epoll.h>

/* turn_attrs (reading a connection's and the reactor's attributes): _speedups_attrs.h */

typedef struct {
    PyObject_HEAD
    int epfd, capacity;
    struct epoll_event *events;
    /* the reactor's epoll object (kept open by this reference), its selectables (fd -> selectable), the plain
     * TCP connection types (a frozenset), the client endpoint's forwarding protocol type, log.callWithLogger,
     * the reactor's _doReadOrWrite, _read_ended and _logged, twisted.python.context, its ThreadedContextTracker,
     * log.ILogContext, main.CONNECTION_DONE and _LOST, posixbase._NO_FILEDESC */
    PyObject *poller, *selectables, *plain, *wrapping, *with_logger, *read_or_write, *read_ended, *logged,
        *context_module, *threaded, *log_key, *done, *lost, *no_fd;
    /* inside run: the context tracker and this thread's stack of it, found at the first read */
    PyObject *run_tracker, *run_stack;
    int in_run;
    turn_attrs conn[2];  /* reading the attributes of the (at most two) plain connection types */
    sw_gate *gate;  /* _speedups_syncwrite.h: when this turn sleeps, for native sync threads; NULL: none linked */
} ReactorTurn;

#define RT_OBJECTS 16
#define RT_GIVEN 14
#define RT_OBJECT(self, i) ((&(self)->poller)[i])

static PyObject *str_the_tracker, *str_storage, *str_ct, *str_current_context, *str_contexts, *str_fileno,
    *str_socket, *str_recv, *str_buffer_size, *str_protocol, *str_wrapped, *str_data_received, *str_logstr,
    *str_system, *str_cached_context, *str_started, *str_thread_calls, *str_new_calls, *str_just_stopped,
    *str_pending_calls, *str_running, *str_time, *str_do_iteration, *str_log_prefix, *str_buggy;

static int reactor_names(void) {
    static const char *const names[] = {
        "theContextTracker", "storage", "ct", "currentContext", "contexts", "fileno", "socket", "recv", "bufferSize",
        "protocol", "_wrappedProtocol", "dataReceived", "logstr", "system", "_rocketpy_log_context", "_started",
        "threadCallQueue", "_newTimedCalls", "_justStopped", "_pendingTimedCalls", "running", "time", "doIteration", "logPrefix",
        "(buggy logPrefix method)"};
    static PyObject **const out[] = {
        &str_the_tracker, &str_storage, &str_ct, &str_current_context, &str_contexts, &str_fileno, &str_socket,
        &str_recv, &str_buffer_size, &str_protocol, &str_wrapped, &str_data_received, &str_logstr, &str_system,
        &str_cached_context, &str_started, &str_thread_calls, &str_new_calls, &str_just_stopped,
        &str_pending_calls, &str_running, &str_time, &str_do_iteration, &str_log_prefix, &str_buggy};
    return intern_names(names, out, (int)(sizeof(names) / sizeof(names[0])));
}

static int turn_traverse(ReactorTurn *self, visitproc visit, void *arg) {
    int i;
    for (i = 0; i < RT_OBJECTS; i++)
        Py_VISIT(RT_OBJECT(self, i));
    return 0;
}

static int turn_clear(ReactorTurn *self) {
    int i;
    for (i = 0; i < RT_OBJECTS; i++)
        Py_CLEAR(RT_OBJECT(self, i));
    return 0;
}

static void turn_dealloc(ReactorTurn *self) {
    PyObject_GC_UnTrack(self);
    turn_clear(self);
    PyMem_Free(self->events);
    if (self->gate != NULL)  /* its syncers, which kept this turn, are gone */
        sw_gate_free(self->gate);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* This thread's stack of twisted.python.context dicts as *stack (a new reference) and the tracker it is from
 * (a new reference, or NULL when the tracker is of another kind: then every event takes Twisted's path);
 * -1 with an exception on failure. Inside run the stack found first is kept while the tracker is the same. */
static int turn_stack(ReactorTurn *self, PyObject **tracker_out, PyObject **stack) {
    PyObject *tracker, *storage, *ct = NULL;
    *tracker_out = *stack = NULL;
    if ((tracker = PyObject_GetAttr(self->context_module, str_the_tracker)) == NULL)
        return -1;
    if (tracker == self->run_tracker) {
        *tracker_out = tracker;
        *stack = Py_NewRef(self->run_stack);
        return 0;
    }
    if (!Py_IS_TYPE(tracker, (PyTypeObject *)self->threaded)) {
        Py_DECREF(tracker);
        return 0;
    }
    if ((storage = PyObject_GetAttr(tracker, str_storage)) != NULL) {
        ct = PyObject_GetAttr(storage, str_ct);
        Py_DECREF(storage);
    }
    if (ct == NULL) {  /* the thread's first use: currentContext makes its tracker */
        if (!PyErr_ExceptionMatches(PyExc_AttributeError)) {
            Py_DECREF(tracker);
            return -1;
        }
        PyErr_Clear();
        ct = PyObject_CallMethodNoArgs(tracker, str_current_context);
    }
    if (ct == NULL || (*stack = PyObject_GetAttr(ct, str_contexts)) == NULL) {
        Py_XDECREF(ct);
        Py_DECREF(tracker);
        return -1;
    }
    Py_DECREF(ct);
    *tracker_out = tracker;
    if (self->in_run && self->run_tracker == NULL) {
        self->run_tracker = Py_NewRef(tracker);
        self->run_stack = Py_NewRef(*stack);
    }
    return 0;
}

/* The stack (a new reference) and the log context the reactor runs in (borrowed from it), as
 * context.get(ILogContext) finds it; 0 with *contexts NULL when the tracker, the stack or the log context is
 * of another kind (then every event takes Twisted's path), -1 with an exception on failure. */
static int turn_contexts(ReactorTurn *self, PyObject **contexts, PyObject **outer) {
    PyObject *tracker, *stack;
    Py_ssize_t i;
    *contexts = *outer = NULL;
    if (turn_stack(self, &tracker, &stack) < 0)
        return -1;
    Py_XDECREF(tracker);
    if (stack == NULL)
        return 0;
    if (!PyList_CheckExact(stack)) {
        Py_DECREF(stack);
        return 0;
    }
    for (i = PyList_GET_SIZE(stack) - 1; i >= 0; i--) {  /* ContextTracker.getContext */
        PyObject *pushed = PyList_GET_ITEM(stack, i), *found;
        if (!PyDict_CheckExact(pushed))
            break;
        if ((found = PyDict_GetItemWithError(pushed, self->log_key)) != NULL) {
            if (PyDict_CheckExact(found)) {
                *contexts = stack;
                *outer = found;
                return 0;
            }
            break;
        }
        if (PyErr_Occurred()) {
            Py_DECREF(stack);
            return -1;
        }
    }
    Py_DECREF(stack);  /* no log context, or an odd one: Twisted's path */
    return 0;
}

/* The dict callWithLogger would push for a selectable whose logPrefix() is ``prefix`` ({ILogContext: outer +
 * system}), kept on it as (outer, prefix, pushed) while the outer context is the same object and the prefix the
 * same string (not kept where it takes no attribute); a new reference, NULL with an exception. ``attrs``: how
 * to read a plain connection's attributes, or NULL. */
static PyObject *turn_pushed(ReactorTurn *self, turn_attrs *attrs, PyObject *selectable, PyObject *outer,
                             PyObject *prefix) {
    PyObject *cached, *log_context = NULL, *pushed = NULL, *kept;
    cached = attrs != NULL ? attrs_get(attrs, selectable, str_cached_context)
                           : PyObject_GetAttr(selectable, str_cached_context);
    if (cached != NULL && PyTuple_CheckExact(cached) && PyTuple_GET_SIZE(cached) == 3 &&
        PyTuple_GET_ITEM(cached, 0) == outer &&
        (PyTuple_GET_ITEM(cached, 1) == prefix ||
         (PyUnicode_CheckExact(prefix) && PyUnicode_CheckExact(PyTuple_GET_ITEM(cached, 1)) &&
          PyUnicode_Compare(prefix, PyTuple_GET_ITEM(cached, 1)) == 0))) {
        pushed = Py_NewRef(PyTuple_GET_ITEM(cached, 2));
        Py_DECREF(cached);
        return pushed;
    }
    Py_XDECREF(cached);
    if (cached == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError))
            return NULL;
        PyErr_Clear();
    }
    if ((log_context = PyDict_Copy(outer)) == NULL || PyDict_SetItem(log_context, str_system, prefix) < 0 ||
        (pushed = PyDict_New()) == NULL || PyDict_SetItem(pushed, self->log_key, log_context) < 0)
        goto failed;
    if ((kept = PyTuple_Pack(3, outer, prefix, pushed)) == NULL)
        goto failed;
    if (PyObject_SetAttr(selectable, str_cached_context, kept) < 0) {
        if (attrs != NULL || !PyErr_ExceptionMatches(PyExc_AttributeError)) {
            Py_DECREF(kept);
            goto failed;
        }
        PyErr_Clear();  /* no attributes of its own (__slots__): a new context each time */
    }
    Py_DECREF(kept);
    goto done;
failed:
    Py_CLEAR(pushed);
done:
    Py_XDECREF(log_context);
    return pushed;
}

/* callWithContext's pop of the context pushed for an event */
static void turn_pop(PyObject *contexts) {
    if (PyList_GET_SIZE(contexts) > 0) {  /* list.pop without shrinking the list's storage */
        PyObject *last = PyList_GET_ITEM(contexts, PyList_GET_SIZE(contexts) - 1);
        Py_SET_SIZE(contexts, PyList_GET_SIZE(contexts) - 1);
        Py_DECREF(last);
    }
}

/* reactor._read_ended(connection, why, raised): 0, or -1 with its exception */
static int turn_ended(ReactorTurn *self, PyObject *connection, PyObject *why, PyObject *raised) {
    PyObject *args[3] = {connection, why, raised};
    PyObject *r = PyObject_Vectorcall(self->read_ended, args, 3, NULL);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* The exception being raised, taken (a new reference, its traceback on it; NULL when none was) */
static PyObject *turn_caught(void) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb != NULL && value != NULL)
        PyException_SetTraceback(value, tb);
    Py_XDECREF(type);
    Py_XDECREF(tb);
    return value;
}

/* The exception being raised, handed to _read_ended as raised (logged there, and the connection dropped). */
static int turn_raised(ReactorTurn *self, PyObject *connection) {
    PyObject *value = turn_caught();
    int r = value == NULL ? 0 : turn_ended(self, connection, value, Py_True);
    Py_XDECREF(value);
    return r;
}

/* _doReadOrWrite for a read event on a plain TCP connection, doRead inlined (LeanEPollReactor._read):
 * 0, or -1 with an exception from _read_ended (everything else is its business). */
static int turn_read(ReactorTurn *self, turn_attrs *attrs, PyObject *connection) {
    PyObject *fileno, *sock, *size, *data, *protocol, *r;
    long fd;
    int truth;
    if ((fileno = attrs_get(attrs, connection, str_fileno)) == NULL)
        return turn_raised(self, connection);
    Py_SETREF(fileno, PyObject_CallNoArgs(fileno));
    if (fileno == NULL)
        return turn_raised(self, connection);
    fd = PyLong_AsLong(fileno);
    Py_DECREF(fileno);
    if (fd == -1) {
        if (PyErr_Occurred())
            return turn_raised(self, connection);
        return turn_ended(self, connection, self->no_fd, Py_False);
    }
    if ((sock = attrs_get(attrs, connection, str_socket)) == NULL)
        return turn_raised(self, connection);
    if ((size = attrs_get(attrs, connection, str_buffer_size)) == NULL) {
        Py_DECREF(sock);
        return turn_raised(self, connection);
    }
    data = PyObject_CallMethodOneArg(sock, str_recv, size);
    Py_DECREF(size);
    Py_DECREF(sock);
    if (data == NULL) {
        if (PyErr_ExceptionMatches(PyExc_OSError)) {  /* doRead: EWOULDBLOCK is nothing, the rest a lost connection */
            PyObject *type, *value, *tb, *args;
            int would_block = 0, odd;
            PyErr_Fetch(&type, &value, &tb);
            PyErr_NormalizeException(&type, &value, &tb);
            args = value == NULL ? NULL : PyObject_GetAttrString(value, "args");
            if (args != NULL && PyTuple_Check(args) && PyTuple_GET_SIZE(args) > 0 &&
                PyLong_CheckExact(PyTuple_GET_ITEM(args, 0)))
                would_block = PyLong_AsLong(PyTuple_GET_ITEM(args, 0)) == EWOULDBLOCK;
            Py_XDECREF(args);
            odd = PyErr_Occurred() != NULL;  /* reading its args raised: that is what was raised */
            Py_XDECREF(type);
            Py_XDECREF(value);
            Py_XDECREF(tb);
            if (odd)
                return turn_raised(self, connection);
            return would_block ? 0 : turn_ended(self, connection, self->lost, Py_False);
        }
        return turn_raised(self, connection);
    }
    truth = PyBytes_CheckExact(data) ? PyBytes_GET_SIZE(data) > 0 : PyObject_IsTrue(data);
    if (truth <= 0) {  /* _dataReceived: nothing read is the connection done */
        Py_DECREF(data);
        return truth < 0 ? turn_raised(self, connection) : turn_ended(self, connection, self->done, Py_False);
    }
    if ((protocol = attrs_get(attrs, connection, str_protocol)) == NULL) {
        Py_DECREF(data);
        return turn_raised(self, connection);
    }
    if (Py_IS_TYPE(protocol, (PyTypeObject *)self->wrapping)) {  /* a client endpoint's: it only forwards */
        Py_SETREF(protocol, PyObject_GetAttr(protocol, str_wrapped));
        if (protocol == NULL) {
            Py_DECREF(data);
            return turn_raised(self, connection);
        }
    }
    truth = lone_read_turn(protocol, data);  /* a read of one whole frame of a RemotingProtocol, in C */
    r = truth < 0 ? NULL : truth > 0 ? Py_NewRef(Py_None) : PyObject_CallMethodOneArg(protocol, str_data_received, data);
    Py_DECREF(protocol);
    Py_DECREF(data);
    if (r == NULL)
        return turn_raised(self, connection);
    Py_DECREF(r);
    return 0;
}

/* epoll_wait's timeout in ms for a number of seconds, rounded up as select.epoll.poll does (negative: forever) */
static int turn_ms_of(double seconds) {
    double ms;
    if (seconds < 0)
        return -1;
    ms = ceil(ceil(seconds * 1e9) / 1e6);
    return ms > INT_MAX ? INT_MAX : (int)ms;
}

/* epoll_wait's timeout in ms from doPoll's (None: forever); -2 with an exception. */
static int turn_ms(PyObject *timeout) {
    double seconds;
    if (timeout == Py_None)
        return -1;
    seconds = PyFloat_AsDouble(timeout);
    if (seconds == -1.0 && PyErr_Occurred())
        return -2;
    if (isnan(seconds)) {
        PyErr_SetString(PyExc_ValueError, "Invalid value NaN (not a number)");
        return -2;
    }
    return turn_ms_of(seconds);
}

/* The exception being raised, logged by the reactor's _logged under ``system`` as callWithLogger logs it:
 * None, or NULL with an exception from the logging. */
static PyObject *turn_logged(ReactorTurn *self, PyObject *system) {
    PyObject *value = turn_caught(), *r;
    PyObject *args[2] = {value, system};
    if (value == NULL)
        return Py_NewRef(Py_None);
    r = PyObject_Vectorcall(self->logged, args, 2, NULL);
    Py_DECREF(value);
    return r;
}

/* log.callWithLogger(selectable, _doReadOrWrite, selectable, fd, event): with the log context stack at hand,
 * logPrefix() called and the context pushed here, then _doReadOrWrite called; an exception from it logged under
 * the prefix by the reactor's _logged (KeyboardInterrupt goes on), as a logPrefix() that raises is (then the
 * prefix is "(buggy logPrefix method)"). No usual context stack: callWithLogger itself. 0, or -1 with an
 * exception. */
static int turn_other(ReactorTurn *self, PyObject *selectable, PyObject *key, uint32_t event, PyObject *contexts,
                      PyObject *outer) {
    PyObject *event_obj = PyLong_FromUnsignedLong(event), *prefix = NULL, *pushed = NULL, *r;
    int result = 0;
    if (event_obj == NULL)
        return -1;
    if (contexts != NULL) {
        prefix = PyObject_CallMethodNoArgs(selectable, str_log_prefix);
        if (prefix == NULL) {  /* callWithLogger: logged, and the event handled under a prefix saying so */
            if (PyErr_ExceptionMatches(PyExc_KeyboardInterrupt) || (prefix = turn_logged(self, str_buggy)) == NULL) {
                Py_DECREF(event_obj);
                return -1;
            }
            Py_SETREF(prefix, Py_NewRef(str_buggy));
        }
    }
    if (prefix == NULL) {
        PyObject *args[5] = {selectable, self->read_or_write, selectable, key, event_obj};
        r = PyObject_Vectorcall(self->with_logger, args, 5, NULL);
        Py_DECREF(event_obj);
        Py_XDECREF(r);
        return r == NULL ? -1 : 0;
    }
    pushed = turn_pushed(self, NULL, selectable, outer, prefix);
    if (pushed == NULL || PyList_Append(contexts, pushed) < 0) {
        result = -1;
    } else {
        PyObject *args[3] = {selectable, key, event_obj};
        r = PyObject_Vectorcall(self->read_or_write, args, 3, NULL);
        turn_pop(contexts);
        if (r == NULL && !PyErr_ExceptionMatches(PyExc_KeyboardInterrupt))
            r = turn_logged(self, prefix);
        if (r == NULL)
            result = -1;
        Py_XDECREF(r);
    }
    Py_XDECREF(pushed);
    Py_DECREF(prefix);
    Py_DECREF(event_obj);
    return result;
}

/* One poll and its events; 0, or -1 with an exception (the caller's, as doPoll raises it). */
static int turn_once(ReactorTurn *self, int ms) {
    PyObject *contexts = NULL, *outer = NULL;
    Py_ssize_t wanted = PyDict_GET_SIZE(self->selectables);
    int n, i, looked = 0, result = 0, err, first;
    if (wanted < 1)
        wanted = 1;
    if (wanted > INT_MAX / (int)sizeof(struct epoll_event))
        wanted = INT_MAX / (int)sizeof(struct epoll_event);
    if (wanted > self->capacity) {
        struct epoll_event *grown = PyMem_Realloc(self->events, (size_t)wanted * sizeof(struct epoll_event));
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        self->events = grown;
        self->capacity = (int)wanted;
    }
    if (ms == 0) {
        n = epoll_wait(self->epfd, self->events, (int)wanted, 0);
        err = errno;
    } else {
        sw_gate *gate = self->gate;
        if (gate != NULL)  /* asleep from here: a native sync thread may write an answer meanwhile */
            sw_before_wait(gate);
        Py_BEGIN_ALLOW_THREADS
        n = epoll_wait(self->epfd, self->events, (int)wanted, ms);
        err = errno;
        if (gate != NULL)
            sw_awake(gate);
        Py_END_ALLOW_THREADS
        if (gate != NULL && (first = sw_after_wait(gate)) >= 0) {  /* what it wrote, settled before any Python */
            for (i = 1; i < n; i++)  /* and its sync's end handled before the other events */
                if (self->events[i].data.fd == first) {
                    struct epoll_event swapped = self->events[0];
                    self->events[0] = self->events[i];
                    self->events[i] = swapped;
                    break;
                }
        }
    }
    if (n < 0) {
        errno = err;
        if (err == EINTR)  /* doPoll returns; the signal's handlers run first (PEP 475) */
            return PyErr_CheckSignals();
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    for (i = 0; i < n && result == 0; i++) {
        int fd = self->events[i].data.fd;
        uint32_t event = self->events[i].events;
        PyObject *key = PyLong_FromLong(fd), *selectable;
        if (key == NULL) {
            result = -1;
            break;
        }
        selectable = Py_XNewRef(PyDict_GetItemWithError(self->selectables, key));
        if (selectable == NULL) {
            Py_DECREF(key);
            if (PyErr_Occurred())
                result = -1;
            continue;
        }
        if (!looked) {  /* the log context stack, once per poll */
            looked = 1;
            if (turn_contexts(self, &contexts, &outer) < 0)
                result = -1;
        }
        if (result == 0 && event == EPOLLIN && contexts != NULL &&
            (result = PySet_Contains(self->plain, (PyObject *)Py_TYPE(selectable))) == 1) {
            /* the connection's attributes, read through its type's slot (a copy: a read may run a turn) */
            turn_attrs *slot = self->conn[0].type == Py_TYPE(selectable) || self->conn[0].type == NULL
                                   ? &self->conn[0] : &self->conn[1];
            turn_attrs attrs = *slot;
            PyObject *pushed = NULL;
            if (attrs_begin(&attrs, selectable) == 0) {
                PyObject *prefix = attrs_get(&attrs, selectable, str_logstr);  /* Connection.logPrefix() */
                slot->type = attrs.type;
                slot->tag = attrs.tag;
                if (prefix != NULL)
                    pushed = turn_pushed(self, &attrs, selectable, outer, prefix);
                Py_XDECREF(prefix);
            }
            result = pushed == NULL ? -1 : PyList_Append(contexts, pushed);
            Py_XDECREF(pushed);
            if (result == 0) {
                result = turn_read(self, &attrs, selectable);
                turn_pop(contexts);
            }
            attrs_end(&attrs);
        } else if (result == 0) {
            result = turn_other(self, selectable, key, event, contexts, outer);
        }
        Py_DECREF(selectable);
        Py_DECREF(key);
    }
    Py_XDECREF(contexts);
    return result < 0 ? -1 : 0;
}

/* poll(timeout): doPoll */
static PyObject *turn_poll(ReactorTurn *self, PyObject *timeout) {
    int ms = turn_ms(timeout);
    if (ms == -2 || turn_once(self, ms) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* A truth test of reactor.name: 1, 0, or -1 with an exception (lists without a call). */
static int turn_attr_true(turn_attrs *attrs, PyObject *reactor, PyObject *name) {
    PyObject *value = attrs_get(attrs, reactor, name);
    int truth;
    if (value == NULL)
        return -1;
    truth = PyList_CheckExact(value) ? PyList_GET_SIZE(value) > 0 : PyObject_IsTrue(value);
    Py_DECREF(value);
    return truth;
}

/* The result of calling obj as a float seconds (None: -1.0); -2.0 with an exception. */
static double turn_call_seconds(PyObject *callable, int *none) {
    PyObject *value = PyObject_CallNoArgs(callable);
    double seconds;
    *none = 0;
    if (value == NULL)
        return -2.0;
    if (value == Py_None) {
        Py_DECREF(value);
        *none = 1;
        return -1.0;
    }
    seconds = PyFloat_AsDouble(value);
    Py_DECREF(value);
    return seconds == -1.0 && PyErr_Occurred() ? -2.0 : seconds;
}

#define TURN_LONGEST 2147483.0  /* epoll_wait's timeout is a C int of ms (ReactorBase.timeout's limit) */

/* run(reactor, poll, seconds, run_due, timeout): LeanEPollReactor.mainLoop's inner loop, until the reactor's
 * _started is false (None) or something raises (the caller logs it and calls again). A turn with no thread
 * call, no new timed call and no shutdown pending and no timed call due skips run_due and timeout; the poll
 * is this object's own while reactor.doIteration is ``poll``, else doIteration is called. */
static PyObject *turn_loop(ReactorTurn *self, PyObject *reactor, PyObject *poll, PyObject *seconds, PyObject *run_due,
                           PyObject *timeout);
static PyObject *turn_loop_once(ReactorTurn *self, turn_attrs *attrs, PyObject *reactor, PyObject *poll,
                                PyObject *seconds, PyObject *run_due, PyObject *timeout);

static PyObject *turn_run(ReactorTurn *self, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *result;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "run(reactor, poll, seconds, run_due, timeout)");
        return NULL;
    }
    if (self->in_run) {
        PyErr_SetString(PyExc_RuntimeError, "the reactor's loop is running already");
        return NULL;
    }
    self->in_run = 1;
    result = turn_loop(self, args[0], args[1], args[2], args[3], args[4]);
    self->in_run = 0;
    Py_CLEAR(self->run_tracker);
    Py_CLEAR(self->run_stack);
    return result;
}

static PyObject *turn_loop(ReactorTurn *self, PyObject *reactor, PyObject *poll, PyObject *seconds, PyObject *run_due,
                           PyObject *timeout) {
    static PyObject *const *const names[] = {&str_started, &str_thread_calls, &str_new_calls, &str_just_stopped,
                                             &str_pending_calls, &str_running, &str_do_iteration};
    turn_attrs attrs = {NULL, 0, names, sizeof(names) / sizeof(names[0]), NULL};
    PyObject *result;
    for (;;) {
        if (attrs_begin(&attrs, reactor) < 0)
            return NULL;
        result = turn_loop_once(self, &attrs, reactor, poll, seconds, run_due, timeout);
        attrs_end(&attrs);
        if (result != Py_True)
            return result;  /* None once stopped, NULL when raising */
        Py_DECREF(result);
    }
}

/* One turn of turn_loop: True, None once the reactor stopped, NULL with an exception. */
static PyObject *turn_loop_once(ReactorTurn *self, turn_attrs *attrs, PyObject *reactor, PyObject *poll,
                                PyObject *seconds, PyObject *run_due, PyObject *timeout) {
    {
        PyObject *pending, *first, *when, *iteration, *r;
        double delay = 0.0;
        int truth, forever = 0, due = 0, running;
        if ((truth = turn_attr_true(attrs, reactor, str_started)) <= 0)
            return truth < 0 ? NULL : Py_NewRef(Py_None);
        if ((truth = turn_attr_true(attrs, reactor, str_thread_calls)) == 0 &&
            (truth = turn_attr_true(attrs, reactor, str_new_calls)) == 0)
            truth = turn_attr_true(attrs, reactor, str_just_stopped);
        if (truth < 0)
            return NULL;
        if (truth) {
            due = 1;
        } else {
            if ((pending = attrs_get(attrs, reactor, str_pending_calls)) == NULL)
                return NULL;
            if (!PyList_CheckExact(pending)) {  /* not the heap list the reactor keeps: ask it */
                Py_DECREF(pending);
                due = 1;
            } else if (PyList_GET_SIZE(pending) == 0) {
                Py_DECREF(pending);
                forever = 1;
            } else {
                double now;
                int none;
                first = Py_NewRef(PyList_GET_ITEM(pending, 0));
                Py_DECREF(pending);
                when = PyObject_GetAttr(first, str_time);
                Py_DECREF(first);
                if (when == NULL)
                    return NULL;
                delay = PyFloat_AsDouble(when);
                Py_DECREF(when);
                if (delay == -1.0 && PyErr_Occurred())
                    return NULL;
                if ((now = turn_call_seconds(seconds, &none)) == -2.0 && PyErr_Occurred())
                    return NULL;
                delay -= now;
                if (delay <= 0)
                    due = 1;
                else if (delay > TURN_LONGEST)
                    delay = TURN_LONGEST;
            }
        }
        if (due) {
            if ((r = PyObject_CallNoArgs(run_due)) == NULL)
                return NULL;
            Py_DECREF(r);
            if ((delay = turn_call_seconds(timeout, &forever)) == -2.0 && PyErr_Occurred())
                return NULL;
        }
        if ((running = turn_attr_true(attrs, reactor, str_running)) < 0)
            return NULL;
        if ((iteration = attrs_get(attrs, reactor, str_do_iteration)) == NULL)
            return NULL;
        if (iteration == poll) {
            Py_DECREF(iteration);
            /* a signal's Python handler runs now, as the eval loop between Python turns would run it */
            if (PyErr_CheckSignals() < 0 || turn_once(self, !running ? 0 : forever ? -1 : turn_ms_of(delay)) < 0)
                return NULL;
        } else {  /* doIteration(self.running and delay) */
            PyObject *given = !running ? attrs_get(attrs, reactor, str_running)
                              : forever ? Py_NewRef(Py_None) : PyFloat_FromDouble(delay);
            r = given == NULL ? NULL : PyObject_CallOneArg(iteration, given);
            Py_XDECREF(given);
            Py_DECREF(iteration);
            if (r == NULL)
                return NULL;
            Py_DECREF(r);
        }
    }
    Py_RETURN_TRUE;
}

static PyMethodDef turn_methods[] = {
    {"poll", (PyCFunction)turn_poll, METH_O, "LeanEPollReactor.doPoll: one epoll_wait and its events."},
    {"run", (PyCFunction)(void (*)(void))turn_run, METH_FASTCALL,
     "LeanEPollReactor.mainLoop's inner loop: run(reactor, poll, seconds, run_due, timeout)."},
    {NULL, NULL, 0, NULL}};

static PyTypeObject ReactorTurnType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "rocketpy._speedups.ReactorTurn",
    .tp_basicsize = sizeof(ReactorTurn),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "LeanEPollReactor's turn in C (rocketpy/remoting/reactor.py).",
    .tp_traverse = (traverseproc)turn_traverse,
    .tp_clear = (inquiry)turn_clear,
    .tp_dealloc = (destructor)turn_dealloc,
    .tp_methods = turn_methods,
};

/* reactor_turn(poller, selectables, plain, wrapping, with_logger, read_or_write, read_ended, logged, context_module,
 * threaded_tracker, log_key, connection_done, connection_lost, no_filedesc) -> ReactorTurn */
static PyObject *reactor_turn(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    ReactorTurn *self;
    int i, epfd;
    if (nargs != RT_GIVEN || !PyDict_CheckExact(args[1]) || !PyFrozenSet_CheckExact(args[2]) ||
        !PyType_Check(args[3]) || !PyType_Check(args[9])) {
        PyErr_SetString(PyExc_TypeError, "reactor_turn(poller, selectables, plain, wrapping, with_logger, "
                                         "read_or_write, read_ended, logged, context_module, threaded_tracker, log_key, "
                                         "connection_done, connection_lost, no_filedesc)");
        return NULL;
    }
    if ((epfd = PyObject_AsFileDescriptor(args[0])) < 0)
        return NULL;
    if (str_the_tracker == NULL && reactor_names() < 0)
        return NULL;
    if (!(ReactorTurnType.tp_flags & Py_TPFLAGS_READY) && PyType_Ready(&ReactorTurnType) < 0)
        return NULL;
    if ((self = PyObject_GC_New(ReactorTurn, &ReactorTurnType)) == NULL)
        return NULL;
    self->epfd = epfd;
    self->capacity = 0;
    self->events = NULL;
    for (i = 0; i < RT_GIVEN; i++)
        RT_OBJECT(self, i) = Py_NewRef(args[i]);
    self->run_tracker = self->run_stack = NULL;
    self->in_run = 0;
    self->gate = NULL;
    for (i = 0; i < 2; i++) {
        static PyObject *const *const names[] = {&str_logstr, &str_cached_context, &str_fileno, &str_socket,
                                                 &str_buffer_size, &str_protocol};
        turn_attrs none = {NULL, 0, names, sizeof(names) / sizeof(names[0]), NULL};
        self->conn[i] = none;
    }
    PyObject_GC_Track(self);
    return (PyObject *)self;
}

/* The gate of a ReactorTurn (made at the first call), NULL when turn is not one or on failure (then with an
 * exception). */
static sw_gate *turn_gate(PyObject *turn) {
    ReactorTurn *self = (ReactorTurn *)turn;
    if (!Py_IS_TYPE(turn, &ReactorTurnType))
        return NULL;
    if (self->gate == NULL)
        self->gate = sw_gate_new();
    return self->gate;
}

#define REACTOR_METHODS                                                                                      \
    {"reactor_turn", (PyCFunction)(void (*)(void))reactor_turn, METH_FASTCALL,                          \
     "LeanEPollReactor's turn in C: reactor_turn(poller, selectables, ...).poll(timeout) is doPoll."},
#else
#define REACTOR_METHODS
#endif
