"""Sessions end everywhere at once.

Logging out ends every login of the user (each browser, each device: the
Django sessions recorded in dashboard.UserLogin are deleted), not only the
tab's. A password change ends the others through Django's own session hash;
deactivation through ModelBackend refusing inactive users.

An open WebSocket was authenticated once, at its handshake; logging out in
another tab, a password change, losing a role or being deactivated left it
receiving approval cards with full ticket content. Two things close it now:

- A push: every consumer also follows its user's group (`user.<id>`), and a
  logout, a password change, a change of the user's groups or permissions or
  `is_active` sends `user.revoked` there after commit. Every open socket of
  the user, in every Daphne process, closes within the layer's latency (the
  browser's reconnect then passes the handshake again only if the user may
  still see it: a password change keeps the tab that made it).
- A re-check: the layer is at-most-once, so before a push goes out the
  consumer re-reads durable state (the Django session row, the user's
  password hash and is_active, the permission) when its last check is older
  than AGENTDESK_WS_RECHECK_S, and closes instead of sending when that fails.
  A lost revocation costs at most that long, never an open-ended feed.
"""

from __future__ import annotations

import logging
from importlib import import_module
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model
from django.contrib.auth.signals import user_logged_in, user_logged_out
from django.db import transaction
from django.db.models.signals import m2m_changed, post_save, pre_save
from django.utils.crypto import constant_time_compare

log = logging.getLogger(__name__)

REVOKED = "user.revoked"
CLOSE_SIGNED_OUT = 4401  # the same code a handshake without a login gets


def user_group(user_id: int) -> str:
    return f"user.{user_id}"


def revoke(user_id: int | None) -> None:
    """Close every open WebSocket of the user, once the current transaction
    commits (a rolled-back role change closes nothing)."""
    if user_id is None:
        return
    transaction.on_commit(lambda: _send(user_id))


def _send(user_id: int) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(user_group(user_id), {"type": REVOKED})
    except Exception:  # Redis away: the consumers' re-check still closes them
        log.warning("could not push the revocation of user %s", user_id, exc_info=True)


def signed_in_user(session_key: str | None) -> Any | None:
    """The user a Django session is still logged in as, read afresh from the
    database (the consumer's scope holds a copy from the handshake): None
    once the session was flushed (logout), expired, its password hash no
    longer matches (password change) or the user is inactive."""
    if not session_key:
        return None
    store = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    user_id = store.get(SESSION_KEY)
    if user_id is None or store.get(BACKEND_SESSION_KEY) not in settings.AUTHENTICATION_BACKENDS:
        return None
    user = get_user_model()._default_manager.filter(pk=user_id, is_active=True).first()
    if user is None:
        return None
    if not constant_time_compare(store.get(HASH_SESSION_KEY, ""), user.get_session_auth_hash()):
        return None
    return user


# --- What revokes ----------------------------------------------------------------


def _on_logged_in(sender: Any, request: Any = None, user: Any = None, **kwargs: Any) -> None:
    from dashboard.models import UserLogin

    session = getattr(request, "session", None)
    if user is None or session is None:
        return
    if session.session_key is None:
        session.save()
    UserLogin.objects.update_or_create(session_key=session.session_key, defaults={"user": user})


def _on_logged_out(sender: Any, request: Any = None, user: Any = None, **kwargs: Any) -> None:
    """Every login of the user ends, then every socket of theirs closes."""
    from dashboard.models import UserLogin

    if user is None:
        return
    engine = import_module(settings.SESSION_ENGINE)
    logins = UserLogin.objects.filter(user=user)
    for key in logins.values_list("session_key", flat=True):
        engine.SessionStore(key).delete()
    logins.delete()
    revoke(user.pk)


def _remember_before_save(sender: Any, instance: Any, update_fields=None, **kwargs: Any) -> None:
    if instance.pk is None or (
        update_fields is not None and not {"password", "is_active"} & set(update_fields)
    ):
        instance._revocation_before = None
        return
    instance._revocation_before = (
        sender._default_manager.filter(pk=instance.pk).values_list("password", "is_active").first()
    )


def _on_saved(sender: Any, instance: Any, created: bool, **kwargs: Any) -> None:
    before = getattr(instance, "_revocation_before", None)
    if before is None:
        return
    password, active = before
    if password != instance.password or (active and not instance.is_active):
        revoke(instance.pk)


def _on_user_m2m(sender: Any, instance: Any, action: str, reverse: bool, pk_set, **kwargs) -> None:
    """A user lost a group or a permission (or a group lost users)."""
    if action not in ("post_remove", "post_clear", "pre_clear"):
        return
    if action == "pre_clear" and reverse:  # group.user_set.clear(): who, before it is gone
        for user_id in instance.user_set.values_list("pk", flat=True):
            revoke(user_id)
        return
    if action == "pre_clear":
        return
    if not reverse:
        revoke(instance.pk)
    else:
        for user_id in pk_set or ():
            revoke(user_id)


def _on_group_permissions(sender: Any, instance: Any, action: str, reverse: bool, pk_set, **kw):
    """A group lost a permission: every member may have lost a right."""
    if action not in ("post_remove", "post_clear"):
        return
    from django.contrib.auth.models import Group

    groups = Group.objects.filter(pk__in=pk_set) if reverse else [instance]
    for group in groups:
        for user_id in group.user_set.values_list("pk", flat=True):
            revoke(user_id)


def connect() -> None:
    from django.contrib.auth.models import Group

    user_model = get_user_model()
    user_logged_in.connect(_on_logged_in, dispatch_uid="revocation.logged_in")
    user_logged_out.connect(_on_logged_out, dispatch_uid="revocation.logged_out")
    pre_save.connect(_remember_before_save, sender=user_model, dispatch_uid="revocation.pre")
    post_save.connect(_on_saved, sender=user_model, dispatch_uid="revocation.post")
    m2m_changed.connect(
        _on_user_m2m, sender=user_model.groups.through, dispatch_uid="revocation.groups"
    )
    m2m_changed.connect(
        _on_user_m2m, sender=user_model.user_permissions.through, dispatch_uid="revocation.perms"
    )
    m2m_changed.connect(
        _on_group_permissions, sender=Group.permissions.through, dispatch_uid="revocation.gperms"
    )
