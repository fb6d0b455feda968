"""The error of a request whose content is invalid, shared by every layer that reads requests."""

from __future__ import annotations


class RequestError(ValueError):
    """A request's content is invalid (a header field, the body): the server answers SYSTEM_ERROR
    with this message as the remark and logs one warning line, without a traceback."""
