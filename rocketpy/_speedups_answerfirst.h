/* rocketpy._speedups, the answer of a lone send written before the store's bookkeeping
 * (doc/benchmarks.md, "Twenty-seventh pass: the broker's lone send, answer first"): included once, after
 * _speedups_remoting.h (stored_response) and json_frame, before _speedups_request.h (lone_send uses it).
 *
 * answer_first  when StoreService.put_lone_now stored a lone send's message at once (its result
 *               itself, no Deferred): the response built and, when it is the plain case, written
 *               through RemotingProtocol.answer_now; then, whatever happened, the store's
 *               lone_answered (the put's arrival notices: long polls, HA slaves, the timer; and
 *               the next hop), so the producer's answer leaves before them.
 */

/* _speedups_loneread.h: RemotingProtocol.answer_now in C for that type, the method otherwise */
static int channel_answer_now(PyObject *channel, PyObject *frame);
/* _speedups_lonestore.h: answered(), StoreService.lone_answered in C for that method */
static PyObject *store_answered(PyObject *answered);

/* The answer of the put that put_lone_now stored at once (result), then answered() called once:
 * True once answer_now took the frame, the response (a refusal, or not the plain case: reference,
 * the processor's _put_response) for the caller to answer, NULL with an exception on failure
 * (answered() called all the same; an exception it raises after the frame was taken is reported
 * as unraisable: the request is answered). */
static PyObject *answer_first(PyObject *channel, PyObject *request, PyObject *queue_id, PyObject *result,
                              PyObject *codes, PyObject *trace_fields, PyObject *reference, PyObject *answered) {
    PyObject *response, *frame, *r, *type, *value, *traceback;
    if ((response = stored_response(result, request, queue_id, codes, trace_fields)) == NULL) {
        PyObject *call[3] = {result, request, queue_id};
        response = PyErr_Occurred() ? NULL : PyObject_Vectorcall(reference, call, 3, NULL);
    } else if ((frame = json_frame(NULL, response)) == NULL) {
        Py_CLEAR(response);
    } else if (frame == Py_None) {
        Py_DECREF(frame);  /* the caller encodes the response */
    } else {
        int written = channel_answer_now(channel, frame);
        Py_DECREF(frame);
        Py_SETREF(response, written < 0 ? NULL : Py_NewRef(Py_True));
    }
    PyErr_Fetch(&type, &value, &traceback);
    r = store_answered(answered);
    if (r != NULL) {
        Py_DECREF(r);
        PyErr_Restore(type, value, traceback);
    } else if (type != NULL) {  /* the first failure wins */
        PyErr_Clear();
        PyErr_Restore(type, value, traceback);
    } else if (response == Py_True) {  /* answered already: not a failure of the request */
        PyErr_WriteUnraisable(answered);
    } else {
        Py_CLEAR(response);
    }
    return response;
}
