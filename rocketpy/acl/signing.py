"""Request signatures as Java's ``AclClientRPCHook`` / ``AclUtils`` / ``AclSigner`` compute them.

``Signature = Base64(HmacSHA1(secretKey, values of the extFields sorted by key ‖ body))``:
values only, no separators, ``Signature`` itself left out (the broker also leaves out
``_UNIQUE_KEY_QUERY``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Container, Mapping, Sequence

from zope.interface import implementer

from rocketpy.interfaces import IRPCHook
from rocketpy.remoting.codec import string_fields
from rocketpy.remoting.command import RemotingCommand

ACCESS_KEY = "AccessKey"
SECRET_KEY = "SecretKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"
#: Left out of the content the broker rebuilds (Java's ``MixAll.UNIQUE_MSG_QUERY_FLAG``).
UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"


def signed_fields(ext_fields: Mapping[str, str], leave_out: Container[str] = (SIGNATURE,)) -> bytes:
    """The field part of what a signature covers: the values in key order (the body follows)."""
    text = "".join([value for key, value in sorted(ext_fields.items()) if key not in leave_out])
    return text.encode("utf-8", "surrogatepass")


def signed_content(ext_fields: Mapping[str, str], body: bytes | None, leave_out: Container[str] = (SIGNATURE,)) -> bytes:
    """The bytes a signature covers: the field values in key order, then the body."""
    return signed_fields(ext_fields, leave_out) + (body or b"")


class Signer:
    """HMAC-SHA1 with one secret key, the key schedule computed once (about half the cost per request)."""

    def __init__(self, secret_key: str) -> None:
        self._mac = hmac.new(secret_key.encode("utf-8"), digestmod=hashlib.sha1)

    def sign(self, *parts: bytes) -> str:
        """``Base64(HmacSHA1(secret_key, parts joined))``."""
        mac = self._mac.copy()
        for part in parts:
            mac.update(part)
        return base64.b64encode(mac.digest()).decode("ascii")


def sign(content: bytes, secret_key: str) -> str:
    """``Base64(HmacSHA1(secret_key, content))``."""
    return Signer(secret_key).sign(content)


@implementer(IRPCHook)
class AclClientHook:
    """Signs every request sent, as Java's ``AclClientRPCHook``: adds ``AccessKey``
    (and ``SecurityToken`` if given), then ``Signature``."""

    def __init__(self, access_key: str, secret_key: str, security_token: str | None = None) -> None:
        self.access_key = access_key
        self._signer = Signer(secret_key)
        self._token = security_token

    def before_request(self, remote_address: str, request: RemotingCommand) -> None:
        fields = string_fields(request.ext_fields)  # sign the text the broker will see
        fields[ACCESS_KEY] = self.access_key
        if self._token is not None:
            fields[SECURITY_TOKEN] = self._token
        fields[SIGNATURE] = self._signer.sign(signed_fields(fields), request.body)
        request.ext_fields = fields

    def after_response(self, remote_address: str, request: RemotingCommand, response: RemotingCommand) -> None:
        pass


def credentials_hooks(credentials: Sequence[str] | None) -> tuple[IRPCHook, ...]:
    """The signing hook for ``(access_key, secret_key[, security_token])``, or none.

    :raises ValueError: *credentials* is not such a tuple of strings.
    """
    if credentials is None:
        return ()
    if not isinstance(credentials, (tuple, list)) or len(credentials) not in (2, 3) \
            or not all(isinstance(part, str) and part for part in credentials):
        raise ValueError("credentials must be (access_key, secret_key) or (access_key, secret_key, security_token)")
    return (AclClientHook(*credentials),)
