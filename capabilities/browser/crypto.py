"""Sealing the browser state: AES-GCM with a key from the environment.

The key is AGENTDESK_BROWSER_KEY (urlsafe base64 of 32 bytes). Without one,
a key is derived from SECRET_KEY with HKDF, which is fine for development
and refused in production along with the development secret itself. The
key id (a hash prefix of the key) is stored beside each blob, so a rotated
key says clearly that it cannot open an old row instead of failing opaquely.
The session's key is the associated data: a blob copied to another
session's row does not open there.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import os

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings

NONCE_BYTES = 12


class StateUnreadable(Exception):
    """Sealed with another key, or tampered with."""


@functools.cache
def _key(raw: str, secret: str) -> tuple[bytes, str]:
    if raw:
        key = base64.urlsafe_b64decode(raw.encode() + b"=" * (-len(raw) % 4))
        if len(key) != 32:
            raise ValueError("AGENTDESK_BROWSER_KEY must be urlsafe base64 of 32 bytes")
    else:
        hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"agentdesk-browser")
        key = hkdf.derive(secret.encode())
    return key, hashlib.sha256(key).hexdigest()[:12]


def current() -> tuple[AESGCM, str]:
    key, key_id = _key(settings.AGENTDESK_BROWSER_KEY, settings.SECRET_KEY)
    return AESGCM(key), key_id


def seal(plain: bytes, *, aad: str) -> tuple[bytes, str]:
    aead, key_id = current()
    nonce = os.urandom(NONCE_BYTES)
    return nonce + aead.encrypt(nonce, plain, aad.encode()), key_id


def open_sealed(blob: bytes, *, key_id: str, aad: str) -> bytes:
    aead, current_id = current()
    if key_id != current_id:
        raise StateUnreadable(f"sealed with key {key_id}, the current key is {current_id}")
    try:
        return aead.decrypt(blob[:NONCE_BYTES], blob[NONCE_BYTES:], aad.encode())
    except Exception as exc:  # InvalidTag: tampered, or another session's blob
        raise StateUnreadable("the browser state does not open with this key") from exc
